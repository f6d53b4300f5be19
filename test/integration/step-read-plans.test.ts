// A step group's reads keep a probe per step as the tables grow (src/db/statement-batcher.ts): the
// grouped form of a step's read is a prepared statement whose generic plan may have been made while
// the table looked empty (a new installation, or a cutover that opens every link), and that plan is
// what runs until the statistics change. The active-link read, planned so, materialised a scan of
// every link and joined it to the group (bench:engine, 12 000 users: 3.6 ms a group of five, a fifth
// of the run's database time). Written with the order and LIMIT of the user's own index, its only
// plan is a probe of that index per step.
import test from "ava";
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

/** The nodes of `plan` (EXPLAIN's JSON), depth first. */
function nodes(plan: { "Node Type": string; "Index Name"?: string; Plans?: unknown[] }): string[] {
  const label = plan["Index Name"] ? `${plan["Node Type"]}(${plan["Index Name"]})` : plan["Node Type"];
  return [label, ...(plan.Plans ?? []).flatMap((p) => nodes(p as typeof plan))];
}

test("the grouped active-link read, its generic plan made on an empty table, probes the user's index as the links grow", async (t) => {
  const c = await db.pool.connect();
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
    const { rows } = await c.query<{
      "QUERY PLAN": [{ Plan: Parameters<typeof nodes>[0] & { "Shared Hit Blocks"?: number } }];
    }>(
      // EXECUTE takes no bind parameters: the keys go in as a literal (uuids read back from the table).
      `explain (analyze, buffers, format json) execute active_links('{${users.join(",")}}'::uuid[])`,
    );
    const plan = rows[0]?.["QUERY PLAN"][0]?.Plan;
    if (!plan) return t.fail("no plan");
    const shape = nodes(plan);
    t.log(`${plan["Shared Hit Blocks"] ?? 0} buffers for 12 steps: ${shape.join(" > ")}`);
    t.false(shape.includes("Seq Scan"), `the grouped read scans the links: ${shape.join(" > ")}`);
    t.true(shape.includes("Index Scan(entity_external_mapping_entity_idx)"), shape.join(" > "));
    t.true((plan["Shared Hit Blocks"] ?? 0) <= 12 * 6, `${plan["Shared Hit Blocks"]} buffers for 12 steps`);
    // The same answers as the plain read, one active link per user.
    const got = await c.query(`execute active_links('{${users.join(",")}}'::uuid[])`);
    t.is(got.rows.length, 12);
  } finally {
    await c.query("deallocate all").catch(() => undefined);
    c.release();
  }
});
