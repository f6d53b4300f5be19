// A step group's reads keep a probe per step as the tables grow (src/db/statement-batcher.ts): the
// grouped form of a step's read is a prepared statement whose generic plan may have been made while
// the table looked empty (a new installation, or a cutover that opens every link), and that plan is
// what runs until the statistics change. The active-link read, planned so, materialised a scan of
// every link and joined it to the group (bench:engine, 12 000 users: 3.6 ms a group of five, a fifth
// of the run's database time). Written with the order and LIMIT of the user's own index, its only
// plan is a probe of that index per step.
import test from "ava";
import { planCapture } from "../../bench/scale-plans.js";
import { groupedText } from "../../src/db/statement-batcher.js";
import { ACTIVE_MAPPING } from "../../src/workflows/step/core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("the grouped active-link read, its generic plan made on an empty table, probes the user's index as the links grow", async (t) => {
  // auto_explain in the session that prepares the statement: the plan EXECUTE runs is the cached one.
  const capture = await planCapture(db.url);
  const c = capture.client;
  try {
    // Planned while the table is empty and never analysed, then kept (generic plan).
    await c.query("set plan_cache_mode = force_generic_plan");
    await c.query(`prepare active_links(uuid[]) as ${groupedText(ACTIVE_MAPPING, ["uuid"])}`);
    await c.query("execute active_links(array[gen_random_uuid()])");
    // 20 000 links more, no ANALYZE: the cached plan is the one above.
    await c.query(
      `insert into bitrix_sync.entity_external_mapping (entity_id, external_id)
       select gen_random_uuid(), g::text from generate_series(1, 20000) g`,
    );
    const users = (
      await c.query<{ entity_id: string }>(
        "select entity_id from bitrix_sync.entity_external_mapping order by random() limit 12",
      )
    ).rows.map((r) => r.entity_id);
    let answered = 0;
    const plans = await capture.capture(async () => {
      // EXECUTE takes no bind parameters: the keys go in as a literal (uuids read back from the table).
      answered = (await c.query(`execute active_links('{${users.join(",")}}'::uuid[])`)).rows.length;
    });
    const plan = plans.find((p) => p.query.includes("cross join lateral"));
    if (!plan) return t.fail(`no plan among ${plans.length} statements`);
    t.log(`${plan.buffers} buffers for 12 steps: ${plan.nodes.join(" > ")}`);
    t.deepEqual(plan.seqScans, [], `the grouped read scans the links: ${plan.nodes.join(" > ")}`);
    // The user's index, as an index or bitmap scan: the planner picks either for a handful of rows.
    t.true(
      plan.nodes.some((n) => n.endsWith("(entity_external_mapping_entity_idx)")),
      plan.nodes.join(" > "),
    );
    t.true(plan.buffers <= 12 * 6, `${plan.buffers} buffers for 12 steps`);
    // The same answers as the plain read, one active link per user.
    t.is(answered, 12);
  } finally {
    await c.query("deallocate all").catch(() => undefined);
    await capture.close();
  }
});
