// What the intake's set path reads does not grow with the backlog (take_sync_tasks, migration 000050):
// per user of a batch it probes the one-active-per-user index, whatever the number of active
// workflows. Written as NOT EXISTS, the planner joined that index unparameterised and every user of
// a batch read all of it (found by bench:scale at 10 M users). The plans come from auto_explain, with
// the nested statements, in this test's own session, as bench:scale reads them.
import test from "ava";
import { planCapture } from "../../bench/scale-plans.js";
import { makeUsers } from "../helpers/factories.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Claimed {
  id: string;
  lease_token: string;
  entity_id: string;
  task_type: string;
}

const claim = (limit: number) =>
  db.pool.query<Claimed>(
    "select id, lease_token, entity_id, task_type from bitrix_sync.claim_sync_tasks('plan-test', $1, interval '60 seconds')",
    [limit],
  );

const TAKE =
  "select * from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])";
const takeArgs = (rows: Claimed[]) => [
  rows.map((r) => r.id),
  rows.map((r) => r.lease_token),
  rows.map((r) => r.entity_id),
  rows.map((r) => r.task_type),
  rows.map((r) => `hash-${r.id}`),
  rows.map(() => null),
];

test("a batch of 50 new users reads a few index pages per user beside 3 000 active workflows, whatever the statistics say", async (t) => {
  // The backlog: 3 000 users whose workflows are started and not yet run.
  await makeUsers(db.pool, 3000, "91");
  for (;;) {
    const { rows } = await claim(1000);
    if (rows.length === 0) break;
    await db.pool.query(TAKE, takeArgs(rows));
  }
  const active = Number(
    (
      await db.pool.query<{ n: string }>(
        "select count(*) as n from bitrix_sync.workflow_instances where state not in ('succeeded', 'failed', 'cancelled')",
      )
    ).rows[0]?.n,
  );
  t.is(active, 3000);
  // The statistics as bench:scale's 10 M installation had them when a burst of intents came: taken
  // while no workflow was active, so the index of active workflows is believed empty, and not taken
  // again before the intake runs (autovacuum off for the table, so that its analyze cannot come
  // between). Made here by analysing while the backlog's workflows are forced finished for a moment
  // (session_replication_role = replica: no guard, no history). Plans must not depend on them.
  await db.pool.query("alter table bitrix_sync.workflow_instances set (autovacuum_enabled = false)");
  const force = async (sql: string) => {
    const c = await db.pool.connect();
    try {
      await c.query("begin");
      await c.query("set local session_replication_role = replica");
      await c.query(sql);
      await c.query("commit");
    } finally {
      c.release();
    }
  };
  await force(
    "update bitrix_sync.workflow_instances set state = 'succeeded', finished_at = now() where state = 'created'",
  );
  await db.pool.query("analyze bitrix_sync.workflow_instances");
  await force(
    "update bitrix_sync.workflow_instances set state = 'created', finished_at = null where state = 'succeeded'",
  );

  // Fifty users more, taken by the set path, with the plans of every statement inside.
  await makeUsers(db.pool, 50, "92");
  const { rows: batch } = await claim(50);
  t.is(batch.length, 50);
  const capture = await planCapture(db.url);
  try {
    const plans = await capture.capture(async (c) => {
      const { rows } = await c.query<{ action: string }>(TAKE, takeArgs(batch));
      t.deepEqual(
        [...new Set(rows.map((r) => r.action))],
        ["started"],
        "every intent of the batch started a workflow",
      );
    });
    const lookup = plans.find((p) => p.query.startsWith("with batch as"));
    if (!lookup) return t.fail(`no plan of the set path's lookup among ${plans.length} statements`);
    t.log(`${lookup.buffers} buffers: ${lookup.nodes.join(" > ")}`);
    // Per user: the newest workflow (user index) and the active one (one-active-per-user index),
    // two or three pages each. Unparameterised, each user read the 3 000 entries and their rows.
    t.true(
      lookup.buffers <= 50 * 12,
      `the set path's lookup read ${lookup.buffers} buffers for 50 users (${lookup.nodes.join(" > ")})`,
    );
  } finally {
    await capture.close();
  }
});
