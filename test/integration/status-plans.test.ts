// Status views and /metrics read live rows through indexes, never the finished history (issue 11,
// sql/status.sql): with a large history and a handful of live rows, no plan of a status view or a
// metrics query scans a whole table that retention keeps bounded. Plans are asserted (a behaviour of
// the schema); the times are printed only.
import test from "ava";
import { inTransaction } from "../../src/db/tx.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
const HISTORY = 100_000;

test.before(async () => {
  db = await createTestDb();
  // History straight into its final states, with the row guards off (sql/row_guards.sql lets a row
  // be born only in its initial state).
  const q = (sql: string) =>
    inTransaction(db.pool, async (c) => {
      await c.query("set local session_replication_role = replica");
      await c.query(sql);
    });
  // Finished history, as months of traffic leave it before retention runs.
  await q(`insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, status, outcome, processed_at, received_at)
           select 'contact', 3, (100000 + g % 5000)::text, 'processed', 'applied', now() - interval '1 day', now() - interval '1 day'
             from generate_series(1, ${HISTORY}) g`);
  await q(`insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, finished_at, outcome)
           select 'contact.update', 'contact.update', gen_random_uuid(), 'succeeded', now() - interval '1 day', 'updated'
             from generate_series(1, ${HISTORY}) g`);
  await q(`insert into bitrix_sync.crm_commands (workflow_id, command_type, status, completed_at)
           select (select id from bitrix_sync.workflow_instances limit 1), 'contact.read', 'succeeded', now() - interval '1 day'
             from generate_series(1, ${HISTORY}) g`);
  await q(`insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, status, completed_at)
           select 'contact.update', 'user', u, 'contact.update:user:' || u, 'processed', now() - interval '1 day'
             from (select gen_random_uuid() as u from generate_series(1, ${HISTORY})) g`);
  await q(`insert into bitrix_sync.business_alerts (alert_type, fingerprint, status, closed_at, crm_sync_status)
           select 'duplicate_contacts', md5(g::text) || md5((g + 1)::text), 'closed', now(), 'synced'
             from generate_series(1, ${HISTORY / 4}) g`);
  await q(`insert into bitrix_sync.technical_dead_letters (source, source_id, operation, error_code, resolved_at, resolved_by, resolution, resolution_reason)
           select 'webhook', g::text, 'webhook.contact', 'crm_rejected', now(), 'ops:t', 'acknowledged', 'seen it'
             from generate_series(1, ${HISTORY / 4}) g`);
  // A handful of live rows.
  await q(
    `insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id) values ('contact', 3, '7')`,
  );
  await q(
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id) values ('contact.update', 'contact.update', gen_random_uuid())`,
  );
  await q(`insert into bitrix_sync.crm_commands (workflow_id, command_type)
           select id, 'contact.read' from bitrix_sync.workflow_instances where state = 'created' limit 1`);
  await q(`insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key)
           values ('contact.update', 'user', gen_random_uuid(), 'contact.update:user:live')`);
  await q(
    `select bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('b', 64), gen_random_uuid())`,
  );
  await q(
    `insert into bitrix_sync.technical_dead_letters (source, source_id, operation, error_code) values ('webhook', '1', 'webhook.contact', 'crm_rejected')`,
  );
  // An open pause, so its view counts the work in hand (sql/status/pause.sql).
  await q("select * from bitrix_sync.pause_sync('ops:test', 'the plans of status_pause')");
  await q("analyze");
});
test.after.always(async () => {
  await db?.drop();
});

/** Tables whose history grows with traffic (retention bounds it; nothing live may scan it). */
const BIG = new Set([
  "webhook_inbox",
  "workflow_instances",
  "crm_commands",
  "sync_queue",
  "business_alerts",
  "technical_dead_letters",
]);

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Index Recheck"?: number;
  Plans?: PlanNode[];
}

function walk(n: PlanNode, out: PlanNode[] = []): PlanNode[] {
  out.push(n);
  for (const c of n.Plans ?? []) walk(c, out);
  return out;
}

/** Rows a scan node read from its table: returned plus filtered away, over all its loops. */
const rowsRead = (n: PlanNode) =>
  ((n["Actual Rows"] ?? 0) + (n["Rows Removed by Filter"] ?? 0) + (n["Rows Removed by Index Recheck"] ?? 0)) *
  (n["Actual Loops"] ?? 1);

const describe = (nodes: PlanNode[]) =>
  nodes
    .map(
      (n) =>
        `${n["Node Type"]}${n["Relation Name"] ? ` ${n["Relation Name"]}` : ""}${n["Index Name"] ? ` (${n["Index Name"]})` : ""}`,
    )
    .join(" > ");

const QUERIES = [
  "select * from bitrix_sync.status_queue",
  "select * from bitrix_sync.status_workflows",
  "select * from bitrix_sync.status_commands",
  "select * from bitrix_sync.status_webhooks",
  "select * from bitrix_sync.status_dead_letters",
  "select * from bitrix_sync.status_alerts",
  "select * from bitrix_sync.status_alert_mirror",
  "select * from bitrix_sync.status_pause",
  // the age of the alerts the smart process is behind on (metrics_snapshot's mirror rows)
  `select a.crm_sync_status, count(*), min(case when a.item_id is null then a.created_at else a.updated_at end)
     from bitrix_sync.business_alerts a where a.crm_sync_status <> 'synced' group by a.crm_sync_status`,
  // the mapping-invariant gauge of /metrics
  `select count(*) as n from bitrix_sync.entity_external_mapping m
     join han_app.user_identity u on u.id = m.entity_id
    where m.status = 'active' and u.record_status <> 'active'`,
];

for (const sql of QUERIES) {
  test(`reads live rows only, through an index: ${sql.split("\n")[0]}`, async (t) => {
    const { rows } = await db.pool.query<{
      "QUERY PLAN": Array<{ Plan: PlanNode; "Execution Time": number }>;
    }>(`explain (analyze, format json) ${sql}`);
    const top = rows[0]?.["QUERY PLAN"][0];
    const nodes = walk(top?.Plan as PlanNode);
    const onHistory = nodes.filter((n) => BIG.has(n["Relation Name"] ?? ""));
    t.deepEqual(
      onHistory.filter((n) => n["Node Type"] === "Seq Scan").map((n) => n["Relation Name"]),
      [],
      `no sequential scan of a growing table: ${describe(nodes)}`,
    );
    for (const n of onHistory) {
      t.true(
        rowsRead(n) <= 50,
        `${n["Relation Name"]}: ${rowsRead(n)} rows read of ${HISTORY}: ${describe(nodes)}`,
      );
    }
    t.log(
      `${top?.["Execution Time"].toFixed(2)} ms with ${HISTORY} finished rows per table: ${describe(nodes)}`,
    );
  });
}
