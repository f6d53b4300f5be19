// Migration 000020 (docs/performance.md, "Fourth round"): the CHECKs and trigger WHEN clauses of the
// tables the engine and the receivers write one row per statement are stored as text-array
// comparisons, not as IN lists over varchar (PostgreSQL reads them again for every statement), and
// they still refuse what they refused before, by the same names.
import test from "ava";
import type pg from "pg";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const HOT = [
  "han_app.sync_queue",
  "bitrix_sync.crm_commands",
  "bitrix_sync.workflow_instances",
  "bitrix_sync.entity_external_mapping",
  "bitrix_sync.webhook_inbox",
];

test("no CHECK or trigger WHEN on the hot tables is stored as an array of casts", async (t) => {
  const { rows } = await db.pool.query<{ tbl: string; name: string; def: string }>(
    `select c.conrelid::regclass::text as tbl, c.conname as name, pg_get_constraintdef(c.oid) as def
       from pg_constraint c where c.contype = 'c' and c.conrelid = any ($1::regclass[])
     union all
     select g.tgrelid::regclass::text, g.tgname, pg_get_triggerdef(g.oid)
       from pg_trigger g where not g.tgisinternal and g.tgqual is not null and g.tgrelid = any ($1::regclass[])`,
    [HOT],
  );
  t.true(rows.length >= 30, `only ${rows.length} definitions read: is the query still right?`);
  t.deepEqual(
    rows.filter((r) => r.def.includes("ARRAY[")).map((r) => `${r.tbl}.${r.name}`),
    [],
  );
});

/** Runs fn in a transaction that is always rolled back, with the row guards (triggers) off. */
async function rolledBack(fn: (c: pg.PoolClient) => Promise<void>): Promise<void> {
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local session_replication_role = replica");
    await fn(c);
  } finally {
    await c.query("rollback");
    c.release();
  }
}

async function refusedBy(c: pg.PoolClient, sql: string, params: unknown[]): Promise<string | null> {
  // Every probe starts from the rows as inserted: the savepoint is rolled back either way.
  await c.query("savepoint s");
  try {
    await c.query(sql, params);
    return null;
  } catch (e) {
    const err = e as { code?: string; constraint?: string };
    return err.code === "23514" ? (err.constraint ?? "?") : `error ${err.code}`;
  } finally {
    await c.query("rollback to savepoint s");
  }
}

test("the rewritten CHECKs admit their values and refuse others, by their names", async (t) => {
  await rolledBack(async (c) => {
    const wf = "0c0c0c0c-0000-4000-8000-000000000001";
    await c.query(
      `insert into bitrix_sync.workflow_instances (id, user_id, workflow_type, intent_type, state, correlation_id)
       values ($1, gen_random_uuid(), 'contact.update', 'contact.update', 'running', gen_random_uuid())`,
      [wf],
    );
    const { rows } = await c.query<{ id: string }>(
      `insert into bitrix_sync.crm_commands (workflow_id, command_type, status) values ($1, 'contact.read', 'pending')
       returning id::text`,
      [wf],
    );
    const cmd = rows[0]?.id;
    const wfSet = (set: string) => `update bitrix_sync.workflow_instances set ${set} where id = $1`;
    const cmdSet = (set: string) => `update bitrix_sync.crm_commands set ${set} where id = $1::bigint`;

    for (const v of ["created", "running", "waiting_crm", "waiting_retry", "waiting_manual"])
      t.is(await refusedBy(c, wfSet("state = $2"), [wf, v]), null, v);
    for (const v of ["succeeded", "failed", "cancelled"])
      t.is(await refusedBy(c, wfSet("state = $2, finished_at = now()"), [wf, v]), null, v);
    t.is(await refusedBy(c, wfSet("state = 'bogus'"), [wf]), "workflow_instances_state_check");
    t.is(await refusedBy(c, wfSet("state = 'succeeded'"), [wf]), "workflow_instances_finished");
    t.is(
      await refusedBy(c, wfSet("state = 'running', finished_at = now()"), [wf]),
      "workflow_instances_finished",
    );
    for (const v of ["contact.map_or_create", "contact.update", "contact.deactivate", "contact.rebind"]) {
      t.is(await refusedBy(c, wfSet("workflow_type = $2, intent_type = $2"), [wf, v]), null, v);
    }
    t.is(
      await refusedBy(c, wfSet("workflow_type = 'contact.read'"), [wf]),
      "workflow_instances_workflow_type_check",
    );
    t.is(
      await refusedBy(c, wfSet("intent_type = 'contact.read'"), [wf]),
      "workflow_instances_intent_type_check",
    );
    t.is(await refusedBy(c, wfSet("held_intent_type = 'contact.update'"), [wf]), null);
    t.is(
      await refusedBy(c, wfSet("held_intent_type = 'contact.rebind'"), [wf]),
      "workflow_instances_held_intent",
    );

    for (const v of ["pending", "retry_wait", "uncertain", "reconcile"])
      t.is(await refusedBy(c, cmdSet("status = $2"), [cmd, v]), null, v);
    for (const v of ["succeeded", "dead_letter"])
      t.is(await refusedBy(c, cmdSet("status = $2, completed_at = now()"), [cmd, v]), null, v);
    for (const v of ["leased", "in_flight"])
      t.is(
        await refusedBy(
          c,
          cmdSet("status = $2, lease_token = gen_random_uuid(), locked_until = now(), locked_by = 'w'"),
          [cmd, v],
        ),
        null,
        v,
      );
    t.is(await refusedBy(c, cmdSet("status = 'bogus'"), [cmd]), "crm_commands_status_check");
    t.is(await refusedBy(c, cmdSet("status = 'succeeded'"), [cmd]), "crm_commands_completed");
    t.is(await refusedBy(c, cmdSet("status = 'leased'"), [cmd]), "crm_commands_lease");
    t.is(
      await refusedBy(c, cmdSet("command_type = 'contact.delete'"), [cmd]),
      "crm_commands_command_type_check",
    );
  });
});
