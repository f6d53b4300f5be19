// What a claim reads does not grow with the backlog (claim_sync_tasks, migration 000054): it walks
// the claim index in order per status and stops at the rows it takes. Written as one ORDER BY over
// both statuses, it read and sorted every due intent on each call (5 ms for a claim of 40 beside
// 3 000 pending intents, 16-24 ms beside 30 000), so draining a backlog of n intents read about
// n * n / 40 rows. The plans come from auto_explain with the nested statements, as bench:scale
// reads them.
import test from "ava";
import { planCapture, type StatementPlan } from "../../bench/scale-plans.js";
import { makeUsers } from "../helpers/factories.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** n App users signed up (makeUsers), and the queue analysed as autovacuum would after a burst. */
async function signUp(n: number, prefix: string): Promise<void> {
  await makeUsers(db.pool, n, prefix);
  await db.pool.query("analyze han_app.sync_queue");
}

/** The plan of the claim's own statement (the CTE over the queue) in one claim of 40. */
async function claimPlan(): Promise<{ rows: { entity_id: string }[]; plan: StatementPlan }> {
  const capture = await planCapture(db.url);
  try {
    let rows: { entity_id: string }[] = [];
    const plans = await capture.capture(async (c) => {
      rows = (
        await c.query<{ entity_id: string }>(
          "select entity_id from bitrix_sync.claim_sync_tasks('plan-test', 40, interval '60 seconds')",
        )
      ).rows;
    });
    const plan = plans.find((p) => p.query.startsWith("with due"));
    if (!plan) throw new Error(`no plan of the claim's statement among ${plans.length} statements`);
    return { rows, plan };
  } finally {
    await capture.close();
  }
}

test("a claim of 40 reads about as much beside 20 000 pending intents as beside 200, oldest first", async (t) => {
  t.timeout(180_000);
  await signUp(200, "81");
  const small = await claimPlan();
  t.is(small.rows.length, 40);
  t.log(`beside 200: ${small.plan.buffers} buffers, ${small.plan.ms} ms: ${small.plan.nodes.join(" > ")}`);

  await signUp(20_000, "82");
  const large = await claimPlan();
  t.is(large.rows.length, 40);
  t.log(`beside 20 000: ${large.plan.buffers} buffers, ${large.plan.ms} ms: ${large.plan.nodes.join(" > ")}`);
  // The oldest due intents: the 40 after the first claim's, all of the first sign-up.
  const firstBatch = await db.pool.query<{ n: string }>(
    `select count(*) as n from han_app.user_identity where phone_number like '+781%' and id = any($1::uuid[])`,
    [large.rows.map((r) => r.entity_id)],
  );
  t.is(Number(firstBatch.rows[0]?.n), 40, "the claim took the oldest intents, not the newest");
  t.false(
    large.plan.seqScans.includes("sync_queue"),
    `the claim scanned the whole queue: ${large.plan.nodes.join(" > ")}`,
  );
  // The update of 40 rows and their index entries is most of either figure; a sort of the backlog
  // read every page of the queue (about 1 000 more beside 20 000).
  t.true(
    large.plan.buffers <= small.plan.buffers * 2,
    `${large.plan.buffers} buffers beside 20 000 pending intents, ${small.plan.buffers} beside 200`,
  );
});
