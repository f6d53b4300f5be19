// Migration 000027 (docs/performance.md, "Fourth round"): the CHECKs and trigger WHEN clauses of the
// tables the engine and the receivers write one row per statement are stored as text-array
// comparisons, not as IN lists over varchar (PostgreSQL reads them again for every statement), and
// they still refuse what they refused before, by the same names.
import test from "ava";
import { forceInsert, forceRow, rejectsWith } from "../helpers/sql-core.js";
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

test("the rewritten CHECKs admit their values and refuse others, by their names", async (t) => {
  // Rows set directly with the row guards off (forceInsert / forceRow): only the CHECKs decide.
  const wf = String(
    (
      await forceInsert(db.pool, "bitrix_sync.workflow_instances", {
        user_id: "0c0c0c0c-0000-4000-8000-000000000001",
        workflow_type: "contact.update",
        intent_type: "contact.update",
        state: "running",
      })
    ).id,
  );
  const cmd = String(
    (
      await forceInsert(db.pool, "bitrix_sync.crm_commands", {
        workflow_id: wf,
        command_type: "contact.read",
        status: "pending",
      })
    ).id,
  );
  const refusedBy = async (
    table: string,
    id: string,
    values: Record<string, unknown>,
    constraint: string,
  ) => {
    const err = await rejectsWith(t, forceRow(db.pool, table, id, values), "23514", constraint);
    t.is(err.constraint, constraint);
  };
  const wfRow = (values: Record<string, unknown>) =>
    forceRow(db.pool, "bitrix_sync.workflow_instances", wf, values);
  const cmdRow = (values: Record<string, unknown>) =>
    forceRow(db.pool, "bitrix_sync.crm_commands", cmd, values);

  // Each accepted change sets every column its CHECKs couple, so the probes do not depend on order.
  for (const v of ["succeeded", "failed", "cancelled"]) await wfRow({ state: v, finished_at: new Date() });
  for (const v of ["created", "waiting_crm", "waiting_retry", "waiting_manual", "running"])
    await wfRow({ state: v, finished_at: null });
  await refusedBy("bitrix_sync.workflow_instances", wf, { state: "bogus" }, "workflow_instances_state_check");
  await refusedBy(
    "bitrix_sync.workflow_instances",
    wf,
    { state: "succeeded" },
    "workflow_instances_finished",
  );
  await refusedBy(
    "bitrix_sync.workflow_instances",
    wf,
    { state: "running", finished_at: new Date() },
    "workflow_instances_finished",
  );
  for (const v of ["contact.map_or_create", "contact.deactivate", "contact.rebind", "contact.update"])
    await wfRow({ workflow_type: v, intent_type: v });
  await refusedBy(
    "bitrix_sync.workflow_instances",
    wf,
    { workflow_type: "contact.read" },
    "workflow_instances_workflow_type_check",
  );
  await refusedBy(
    "bitrix_sync.workflow_instances",
    wf,
    { intent_type: "contact.read" },
    "workflow_instances_intent_type_check",
  );
  await wfRow({ held_intent_type: "contact.update" });
  await refusedBy(
    "bitrix_sync.workflow_instances",
    wf,
    { held_intent_type: "contact.rebind" },
    "workflow_instances_held_intent",
  );

  const unleased = { lease_token: null, locked_until: null, locked_by: null };
  for (const v of ["succeeded", "dead_letter"])
    await cmdRow({ status: v, completed_at: new Date(), ...unleased });
  for (const v of ["leased", "in_flight"])
    await cmdRow({
      status: v,
      completed_at: null,
      lease_token: "0c0c0c0c-0000-4000-8000-0000000000aa",
      locked_until: new Date(),
      locked_by: "w",
    });
  for (const v of ["retry_wait", "uncertain", "reconcile", "pending"])
    await cmdRow({ status: v, completed_at: null, ...unleased });
  await refusedBy("bitrix_sync.crm_commands", cmd, { status: "bogus" }, "crm_commands_status_check");
  await refusedBy("bitrix_sync.crm_commands", cmd, { status: "succeeded" }, "crm_commands_completed");
  await refusedBy("bitrix_sync.crm_commands", cmd, { status: "leased" }, "crm_commands_lease");
  await refusedBy(
    "bitrix_sync.crm_commands",
    cmd,
    { command_type: "contact.delete" },
    "crm_commands_command_type_check",
  );
  for (const v of ["contact.find_by_phone", "contact.add", "alert.list", "contact.read"])
    await cmdRow({ command_type: v });
});
