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

/** Inserts a user_identity and its client_profile (both active unless told otherwise). */
export async function makeUser(
  db: Queryable,
  opts: { phone?: string | null; status?: string; profile?: boolean; fullName?: string } = {},
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
  return { id, phone: phone ?? "" };
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

/** The queue rows of one user, oldest first. */
export async function queueRows(db: Queryable, userId: string): Promise<QueueRow[]> {
  const { rows } = await db.query<QueueRow>(
    "select * from han_app.sync_queue where entity_id = $1 order by created_at, task_type",
    [userId],
  );
  return rows;
}
