// updated_at (migration 000047, issue 36): the engine's hot statements stamp it themselves, so the
// _900_set_updated_at triggers fire only for a statement that left it as it was; every change is
// stamped with its transaction's time either way.
import test from "ava";
import { forceInsert } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const TABLES = [
  "entity_external_mapping",
  "workflow_instances",
  "crm_commands",
  "business_alerts",
  "rebind_requests",
  "contact_snapshots",
  "reconciliation_cursors",
];

test("every _900_set_updated_at trigger fires only when the statement left updated_at as it was", async (t) => {
  const { rows } = await db.pool.query<{ tbl: string; def: string }>(
    `select c.relname as tbl, pg_get_triggerdef(g.oid) as def
       from pg_trigger g join pg_class c on c.oid = g.tgrelid
      where g.tgname = '_900_set_updated_at' and c.relnamespace = 'bitrix_sync'::regnamespace
        and c.relname = any ($1)
      order by 1`,
    [TABLES],
  );
  t.deepEqual(rows.map((r) => r.tbl).sort(), [...TABLES].sort());
  for (const r of rows)
    t.regex(r.def, /WHEN \(\(NOT \(new\.updated_at IS DISTINCT FROM old\.updated_at\)\)\)/, r.tbl);
});

test("a statement that does not set updated_at is stamped by the trigger; one that does keeps its own stamp", async (t) => {
  const wf = (
    await forceInsert(db.pool, "bitrix_sync.workflow_instances", {
      user_id: "0c0c0c0c-0000-4000-8000-0000000000aa",
      workflow_type: "contact.update",
      intent_type: "contact.update",
    })
  ).id as string;
  const c = await db.pool.connect();
  try {
    await c.query(
      "update bitrix_sync.workflow_instances set updated_at = now() - interval '1 day' where id = $1",
      [wf],
    );
    // Not set by the statement: the trigger stamps the transaction's time.
    await c.query("begin");
    await c.query("update bitrix_sync.workflow_instances set step_data = '{\"pass\": 1}' where id = $1", [
      wf,
    ]);
    const stamped = await c.query<{ ok: boolean }>(
      "select updated_at = now() as ok from bitrix_sync.workflow_instances where id = $1",
      [wf],
    );
    await c.query("commit");
    t.true(stamped.rows[0]?.ok, "the trigger stamped a statement that left updated_at alone");
    // Set by the statement (as the hot statements do): that value stands.
    await c.query(
      "update bitrix_sync.workflow_instances set step_data = '{\"pass\": 2}', updated_at = '2030-01-01Z' where id = $1",
      [wf],
    );
    const own = await c.query<{ at: Date }>(
      "select updated_at as at from bitrix_sync.workflow_instances where id = $1",
      [wf],
    );
    t.is(own.rows[0]?.at.toISOString(), "2030-01-01T00:00:00.000Z");
  } finally {
    c.release();
  }
});

test("the engine's hot functions stamp updated_at with their transaction's time", async (t) => {
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    const wf = (
      await c.query<{ id: string }>(
        `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id)
         values ('contact.update', 'contact.update', '0c0c0c0c-0000-4000-8000-0000000000ab') returning id`,
      )
    ).rows[0]?.id;
    // created -> running with a lease, by hand (claim_workflows is gated by the cutover).
    const token = (
      await c.query<{ token: string }>(
        `update bitrix_sync.workflow_instances set state = 'running', lease_token = gen_random_uuid(),
                locked_until = now() + interval '1 minute', updated_at = now() - interval '1 hour'
          where id = $1 returning lease_token as token`,
        [wf],
      )
    ).rows[0]?.token;
    await c.query(
      "select bitrix_sync.issue_command($1, $2, 'contact.read', '{\"id\": \"1\"}', 'read', null, '{\"pass\": 1}')",
      [wf, token],
    );
    const { rows } = await c.query<{ wf: boolean; cmd: boolean }>(
      `select (select updated_at = now() from bitrix_sync.workflow_instances where id = $1) as wf,
              (select bool_and(updated_at = now()) from bitrix_sync.crm_commands where workflow_id = $1) as cmd`,
      [wf],
    );
    t.deepEqual(rows[0], { wf: true, cmd: true });
    await c.query("rollback");
  } finally {
    c.release();
  }
});
