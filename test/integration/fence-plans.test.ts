// Fenced transitions find their row by primary key, whatever the statistics say (issue 14; the note
// at the top of sql/commands.sql). The trap: statistics taken while almost every row was finished
// history make a live-state partial index look empty, and a transition that tested its state with a
// bare `=` was planned through that index, scanning the whole backlog on every call. These tests
// build exactly those statistics and count index scans (pg_stat_user_indexes).
import test from "ava";
import pg from "pg";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  // History: 3 000 users whose workflow and two commands finished, then ANALYZE.
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    await c.query("begin");
    await c.query("set local session_replication_role = replica");
    await c.query(
      `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, finished_at, outcome)
       select 'contact.map_or_create', 'contact.map_or_create', gen_random_uuid(), 'succeeded', now(), 'created'
         from generate_series(1, 3000)`,
    );
    await c.query(
      `insert into bitrix_sync.crm_commands (workflow_id, command_type, status, sent_at, first_sent_at, completed_at, attempt_count)
       select w.id, t, 'succeeded', now(), now(), now(), 1
         from bitrix_sync.workflow_instances w cross join (values ('contact.find_by_phone'), ('contact.add')) v(t)`,
    );
    await c.query("commit");
    await c.query("analyze bitrix_sync.workflow_instances, bitrix_sync.crm_commands");
  } finally {
    await c.end();
  }
});
test.after.always(async () => {
  await db?.drop();
});

/** Index scans per index of `table`, flushed from this session first. */
async function scans(c: pg.Client, table: string): Promise<Record<string, number>> {
  await c.query("select pg_stat_force_next_flush()");
  await c.query("select 1"); // the flush happens when this session goes idle
  await new Promise((r) => setTimeout(r, 50));
  const { rows } = await c.query<{ name: string; n: string }>(
    `select indexrelname as name, idx_scan as n from pg_stat_user_indexes
      where schemaname = 'bitrix_sync' and relname = $1`,
    [table],
  );
  return Object.fromEntries(rows.map((r) => [r.name, Number(r.n)]));
}

const delta = (after: Record<string, number>, before: Record<string, number>) =>
  Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - (before[k] ?? 0)]));

test.serial(
  "a backlog after an ANALYZE of finished history: each transition reads its row by primary key",
  async (t) => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // The backlog: 400 running workflows under a lease, none of them in the statistics.
      const { rows: wfs } = await c.query<{ id: string; lease_token: string }>(
        `with ins as (
         insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id)
         select 'contact.map_or_create', 'contact.map_or_create', gen_random_uuid() from generate_series(1, 400)
         returning id)
       select id, null::uuid as lease_token from ins`,
      );
      await c.query("select * from bitrix_sync.claim_workflows('fence-test', 400, interval '10 minutes')");
      const { rows: held } = await c.query<{ id: string; lease_token: string }>(
        "select id, lease_token from bitrix_sync.workflow_instances where id = any($1::uuid[]) and state = 'running'",
        [wfs.map((w) => w.id)],
      );
      t.is(held.length, 400);

      // issue_command: running -> waiting_crm under the lease, 40 times.
      const wfBefore = await scans(c, "workflow_instances");
      for (const w of held.slice(0, 40)) {
        await c.query(
          "select bitrix_sync.issue_command($1, $2, 'contact.find_by_phone', '{\"phone_hash\": \"x\"}', 'search')",
          [w.id, w.lease_token],
        );
      }
      const wf = delta(await scans(c, "workflow_instances"), wfBefore);
      t.is(wf.workflow_instances_runnable_idx, 0, "no transition scanned the runnable index");
      t.is(wf.workflow_instances_one_active_per_user_uq, 0, "nor the one-active-per-user index");
      t.true((wf.workflow_instances_pkey ?? 0) >= 40, "each found its row by primary key");

      // The pump's path for those 40 commands: claim and send (they use the claim and lease indexes on
      // purpose), then complete each under its lease, which must not.
      const { rows: claimed } = await c.query<{ id: string; lease_token: string }>(
        "select id, lease_token from bitrix_sync.claim_commands('fence-test', 40, interval '10 minutes')",
      );
      t.is(claimed.length, 40);
      await c.query("select bitrix_sync.send_commands($1::bigint[], $2::uuid[], gen_random_uuid())", [
        claimed.map((r) => r.id),
        claimed.map((r) => r.lease_token),
      ]);
      const cmdBefore = await scans(c, "crm_commands");
      for (const r of claimed) {
        await c.query("select bitrix_sync.complete_command($1, $2, '{}')", [r.id, r.lease_token]);
      }
      const cmd = delta(await scans(c, "crm_commands"), cmdBefore);
      for (const partial of [
        "crm_commands_lease_idx",
        "crm_commands_live_idx",
        "crm_commands_claim_idx",
        "crm_commands_one_active_per_workflow_uq",
      ]) {
        t.is(cmd[partial], 0, `complete_command did not scan ${partial}`);
      }
      t.true((cmd.crm_commands_pkey ?? 0) >= 40);
    } finally {
      await c.end();
    }
  },
);
