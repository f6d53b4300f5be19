// npm run bench:metrics — what the metrics cost the database:
//   1. the transition-counting trigger: BENCH_ROWS workflows moved running -> waiting_crm -> running
//      with and without the trigger, alternating, BENCH_ROUNDS times each (ms per 1 000 transitions);
//   2. a scrape: metrics_snapshot() right after those transitions (it folds them) and again with
//      nothing to fold, with 10 000 active mappings for the minute's mapping check.
// Env: BENCH_ROWS (default 10000), BENCH_ROUNDS (3). Prints numbers; asserts nothing.
import { randomUUID } from "node:crypto";
import { createTestDb } from "../test/helpers/testdb.js";

const ROWS = Number(process.env.BENCH_ROWS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const db = await createTestDb();
const q = (sql: string, params: unknown[] = []) => db.pool.query(sql, params);
const ms = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return performance.now() - t;
};
try {
  const users = Array.from({ length: ROWS }, () => randomUUID());
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local han.sync_suppress = 'true'");
    await c.query(
      "insert into han_app.user_identity (id, phone_number) select u, '+79000000000' from unnest($1::uuid[]) u",
      [users],
    );
    await c.query(
      `insert into bitrix_sync.entity_external_mapping (entity_id, external_id)
       select u, (1000 + n)::text from unnest($1::uuid[]) with ordinality as t(u, n)`,
      [users],
    );
    await c.query(
      `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
       select 'contact.update', 'contact.update', u, gen_random_uuid(), 'x' from unnest($1::uuid[]) u`,
      [users],
    );
    await c.query("update bitrix_sync.workflow_instances set state = 'running'");
    await c.query("commit");
  } finally {
    c.release();
  }
  await q("select count(*) from bitrix_sync.metrics_snapshot(null, false)");
  await q("vacuum analyze bitrix_sync.workflow_instances");

  const roundTrip = () =>
    ms(async () => {
      await q("update bitrix_sync.workflow_instances set state = 'waiting_crm' where state = 'running'");
      await q("update bitrix_sync.workflow_instances set state = 'running' where state = 'waiting_crm'");
    });
  const withTrigger: number[] = [];
  const without: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    withTrigger.push(await roundTrip());
    await q("alter table bitrix_sync.workflow_instances disable trigger _900_count_transition");
    without.push(await roundTrip());
    await q("alter table bitrix_sync.workflow_instances enable trigger _900_count_transition");
  }
  const per1000 = (xs: number[]) => xs.map((x) => ((x / (2 * ROWS)) * 1000).toFixed(0)).join(", ");
  const { rows: pending } = await q("select count(*)::int as n from bitrix_sync.metric_events");
  const fold = await ms(() => q("select count(*) from bitrix_sync.metrics_snapshot(null, true)"));
  const steady = await ms(() => q("select count(*) from bitrix_sync.metrics_snapshot(null, false)"));
  const withMappings = await ms(() => q("select count(*) from bitrix_sync.metrics_snapshot(null, true)"));
  console.log(`transitions (ms per 1 000, ${ROUNDS} rounds of ${2 * ROWS}):`);
  console.log(`  with the counting trigger:    ${per1000(withTrigger)}`);
  console.log(`  without the counting trigger: ${per1000(without)}`);
  console.log(`scrape (metrics_snapshot):`);
  console.log(`  folding ${pending[0]?.n} events, with the mapping check: ${fold.toFixed(0)} ms`);
  console.log(`  nothing to fold, no mapping check: ${steady.toFixed(1)} ms`);
  console.log(`  nothing to fold, mapping check over ${ROWS} active mappings: ${withMappings.toFixed(1)} ms`);
  console.log(`  (${ROWS} workflows are active: the status view counts them all)`);
} finally {
  await db.drop();
}
