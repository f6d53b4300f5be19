// Row factories with defaults for integration tests.
import { randomInt, randomUUID } from "node:crypto";
import type pg from "pg";

type Queryable = pg.Pool | pg.PoolClient | pg.Client;

/** A valid Russian E.164 phone, different on each call. */
export function randomPhone(): string {
  return `+79${String(randomInt(0, 1_000_000_000)).padStart(9, "0")}`;
}

export interface UserRow {
  id: string;
  phone: string;
}

/**
 * Folds the intents the App's triggers appended to han_app.sync_queue_journal into han_app.sync_queue,
 * as every claim does first: after it, the queue holds what a claim would see.
 */
export async function foldJournal(db: Queryable): Promise<void> {
  await db.query("select bitrix_sync.fold_intent_journal(100000, true)");
}

/**
 * Inserts a user_identity and its client_profile (both active unless told otherwise), and folds the
 * journal (unless `fold: false`, e.g. as the App's role, which may not fold), so the user's intent is
 * in han_app.sync_queue when this returns.
 */
export async function makeUser(
  db: Queryable,
  opts: { phone?: string | null; status?: string; profile?: boolean; fullName?: string; fold?: boolean } = {},
): Promise<UserRow> {
  const id = randomUUID();
  const phone = opts.phone === undefined ? randomPhone() : opts.phone;
  if (opts.profile === false) {
    await db.query(
      "insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, $3)",
      [id, phone, opts.status ?? "active"],
    );
  } else {
    // Identity and profile in one statement, so one transaction, as the App signs a user up: the
    // trigger then records one coalesced intent, not two that a fast worker could take apart.
    await db.query(
      `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, $3) returning id)
       insert into han_app.client_profile (user_id, full_name, record_status) select id, $4, $3 from u`,
      [id, phone, opts.status ?? "active", opts.fullName ?? "Test User"],
    );
  }
  if (opts.fold !== false) await foldJournal(db);
  return { id, phone: phone ?? "" };
}

/**
 * Signs up `n` active users in one statement (identity and profile, as makeUser does one), phones
 * `+7<prefix><seven digits>` so a test can tell its batches apart, and folds the journal.
 */
export async function makeUsers(db: Queryable, n: number, prefix: string): Promise<void> {
  await db.query(
    `with u as (insert into han_app.user_identity (id, phone_number, record_status)
                select gen_random_uuid(), '+7' || $2::text || lpad(g::text, 7, '0'), 'active'
                  from generate_series(1, $1::int) g returning id)
     insert into han_app.client_profile (user_id, full_name, record_status) select id, 'Backlog User', 'active' from u`,
    [n, prefix],
  );
  await foldJournal(db);
}

export interface QueueRow {
  id: string;
  task_type: string;
  entity_id: string;
  dedup_key: string;
  status: string;
  payload_json: Record<string, unknown>;
  lease_token: string | null;
  attempt_count: number;
  cancel_reason: string | null;
  created_at: Date;
}

/** The queue rows of one user, oldest first, after folding the journal. */
export async function queueRows(db: Queryable, userId: string): Promise<QueueRow[]> {
  await foldJournal(db);
  const { rows } = await db.query<QueueRow>(
    "select * from han_app.sync_queue where entity_id = $1 order by created_at, task_type",
    [userId],
  );
  return rows;
}
