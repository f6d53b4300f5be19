// The App's intents go through han_app.sync_queue_journal (migration 000026): the trigger appends,
// bitrix_sync.fold_intent_journal() folds into han_app.sync_queue with the trigger's old rules, every
// claim folds first, and the status view counts what is not folded yet.
import test from "ava";
import pg from "pg";
import { foldJournal, makeUser } from "../helpers/factories.js";
import { one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface JournalRow {
  task_type: string;
  reason: string;
  recorded_at: Date;
}

async function journal(userId: string): Promise<JournalRow[]> {
  const { rows } = await db.pool.query<JournalRow>(
    "select task_type, reason, recorded_at from han_app.sync_queue_journal where user_id = $1 order by recorded_at",
    [userId],
  );
  return rows;
}

async function queued(userId: string) {
  const { rows } = await db.pool.query<{
    task_type: string;
    status: string;
    reason: string;
    created_at: Date;
    next_attempt_at: Date;
  }>(
    `select task_type, status, payload_json ->> 'reason' as reason, created_at, next_attempt_at
       from han_app.sync_queue where entity_id = $1 order by created_at, task_type`,
    [userId],
  );
  return rows;
}

async function phone(userId: string, p: string): Promise<void> {
  await db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [userId, p]);
}

test.serial("the trigger appends to the journal and leaves the queue alone until a fold", async (t) => {
  const u = await makeUser(db.pool, { fold: false });
  t.deepEqual(
    (await journal(u.id)).map((r) => [r.task_type, r.reason]),
    [
      ["contact.map_or_create", "identity_created"],
      ["contact.map_or_create", "profile_created"],
    ],
  );
  t.deepEqual(await queued(u.id), []);
  const taken = await one<{ n: number }>(db.pool, "select bitrix_sync.fold_intent_journal() as n");
  t.true(taken.n >= 2);
  t.deepEqual(await journal(u.id), []);
  const rows = await queued(u.id);
  t.deepEqual(
    rows.map((r) => [r.task_type, r.status, r.reason]),
    [["contact.map_or_create", "pending", "profile_created"]],
    "one intent per task and user, with the newest reason",
  );
});

test.serial(
  "a fold coalesces per task and user; the row is as old as the first intent, queued at the last",
  async (t) => {
    const u = await makeUser(db.pool, { fold: false });
    await phone(u.id, "+79990000001");
    await phone(u.id, "+79990000002");
    await db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [u.id]);
    const recorded = await journal(u.id);
    t.is(recorded.length, 5);
    await foldJournal(db.pool);
    const rows = await queued(u.id);
    t.deepEqual(rows.map((r) => [r.task_type, r.reason]).sort(), [
      ["contact.deactivate", "identity_deactivated"],
      ["contact.map_or_create", "profile_created"],
      ["contact.update", "identity_phone_changed"],
    ]);
    const update = rows.find((r) => r.task_type === "contact.update");
    const firstPhone = recorded.find((r) => r.task_type === "contact.update");
    const lastPhone = recorded.filter((r) => r.task_type === "contact.update").at(-1);
    t.is(
      update?.created_at.getTime(),
      firstPhone?.recorded_at.getTime(),
      "created_at: the first intent's time",
    );
    // Its place in the queue is its newest intent's (a user's intents are taken in the order the App
    // recorded them last: e2e-pause-intake-order.test.ts).
    t.is(update?.next_attempt_at.getTime(), lastPhone?.recorded_at.getTime(), "queued at the last intent");
    // A later fold coalesces into the active row instead of adding one.
    await phone(u.id, "+79990000003");
    await foldJournal(db.pool);
    t.is((await queued(u.id)).filter((r) => r.task_type === "contact.update").length, 1);
  },
);

test.serial("a rolled-back App write leaves nothing in the journal", async (t) => {
  const u = await makeUser(db.pool);
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("update han_app.user_identity set phone_number = '+79990000009' where id = $1", [u.id]);
    t.is((await c.query("select 1 from han_app.sync_queue_journal where user_id = $1", [u.id])).rowCount, 1);
    await c.query("rollback");
  } finally {
    c.release();
  }
  t.deepEqual(await journal(u.id), []);
});

test.serial("a claim folds first: it takes the intents the App committed before it", async (t) => {
  // Leave the queue of earlier tests out of the way: nothing else is due.
  await foldJournal(db.pool);
  await db.pool.query(
    `update han_app.sync_queue set status = 'cancelled', cancel_reason = 'test', completed_at = now()
      where status = 'pending'`,
  );
  const u = await makeUser(db.pool, { fold: false });
  const { rows } = await db.pool.query<{ entity_id: string; task_type: string }>(
    "select entity_id, task_type from bitrix_sync.claim_sync_tasks('w', 10, interval '1 minute')",
  );
  t.deepEqual(rows, [{ entity_id: u.id, task_type: "contact.map_or_create" }]);
  t.deepEqual(await journal(u.id), []);
});

test.serial(
  "one fold at a time: a try returns 0 while another folds; a waiting fold takes the rest",
  async (t) => {
    const holder = await db.pool.connect();
    try {
      await holder.query("begin");
      await holder.query("select bitrix_sync.fold_intent_journal()");
      const u = await makeUser(db.pool, { fold: false });
      const tried = await one<{ n: number }>(db.pool, "select bitrix_sync.fold_intent_journal() as n");
      t.is(tried.n, 0, "another transaction holds the fold");
      t.is((await journal(u.id)).length, 2, "nothing taken");
      // A waiting fold (as claims do) goes on once the first commits, and sees what it did not take.
      const waiting = db.pool.query<{ n: number }>(
        "select bitrix_sync.fold_intent_journal(10000, true) as n",
      );
      await new Promise((r) => setTimeout(r, 200));
      await holder.query("commit");
      t.true(((await waiting).rows[0]?.n ?? 0) >= 2);
      t.deepEqual(await journal(u.id), []);
      t.is((await queued(u.id)).length, 1);
    } finally {
      await holder.query("rollback").catch(() => undefined);
      holder.release();
    }
  },
);

test.serial("two sessions folding the same users at once never write one intent twice", async (t) => {
  const users = await Promise.all(Array.from({ length: 20 }, () => makeUser(db.pool, { fold: false })));
  await Promise.all(
    users.map((u) => phone(u.id, `+7999${u.id.replace(/\D/g, "").slice(0, 7).padEnd(7, "0")}`)),
  );
  const [a, b] = await Promise.all([
    db.pool.query<{ n: number }>("select bitrix_sync.fold_intent_journal(10000, true) as n"),
    db.pool.query<{ n: number }>("select bitrix_sync.fold_intent_journal(10000, true) as n"),
  ]);
  t.true((a.rows[0]?.n ?? 0) + (b.rows[0]?.n ?? 0) >= 60);
  const { rows } = await db.pool.query<{ n: string }>(
    `select count(*) as n from han_app.sync_queue
      where entity_id = any($1::uuid[]) and status = 'pending'`,
    [users.map((u) => u.id)],
  );
  t.is(Number(rows[0]?.n), 40, "one map_or_create and one update per user");
});

test.serial("status_queue counts intents not folded yet as pending, with their age", async (t) => {
  await foldJournal(db.pool);
  const before = await one<{ count: string }>(
    db.pool,
    "select coalesce(sum(count), 0) as count from bitrix_sync.status_queue where status = 'pending'",
  );
  const u = await makeUser(db.pool, { fold: false });
  await db.pool.query(
    "update han_app.sync_queue_journal set recorded_at = now() - interval '1 hour' where user_id = $1",
    [u.id],
  );
  const after = await one<{ count: string; oldest_age_sec: string }>(
    db.pool,
    "select count, oldest_age_sec from bitrix_sync.status_queue where status = 'pending'",
  );
  t.is(Number(after.count), Number(before.count) + 2);
  t.true(Number(after.oldest_age_sec) >= 3600);
  await foldJournal(db.pool);
  const folded = await one<{ count: string }>(
    db.pool,
    "select count from bitrix_sync.status_queue where status = 'pending'",
  );
  t.is(Number(folded.count), Number(before.count) + 1, "folded into one intent");
});

test("a fold refuses a limit out of range with BS004 and a hint", async (t) => {
  for (const limit of [0, 100001, null]) {
    const err = await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.fold_intent_journal($1)", [limit]),
      "BS004",
    );
    t.truthy(err.hint);
  }
});

test("the journal is append-only for everyone but its two functions", async (t) => {
  for (const role of ["bitrix_sync_user", "bitrix_sync_admin", "han_app_user"]) {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      await c.query("begin");
      await c.query(`set local role ${role}`);
      await rejectsWith(
        t,
        c.query(
          "insert into han_app.sync_queue_journal (task_type, user_id, reason) values ('x', gen_random_uuid(), 'x')",
        ),
        "42501",
        role,
      );
    } finally {
      await c.end();
    }
  }
});
