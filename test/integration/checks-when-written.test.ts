// The CHECKs of workflow_instances as triggers read only when their columns are written (migration
// 000048, issue 36; sql/guards/checks.sql). The same rule admits and refuses the same rows, under the
// same constraint name and SQLSTATE, for every writer, and a refusal does not print the row.
// _trace_context(), whose form test no longer uses counted repetition, passes exactly the strings the
// regular expression it replaced passes, and so does the workflow table's check.
import { randomInt } from "node:crypto";
import test from "ava";
import type pg from "pg";
import { forceInsert, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** The CHECKs migration 000048 dropped, as they were defined (000047's catalogue). */
const DROPPED: Record<string, string> = {
  workflow_instances_workflow_type_check:
    "workflow_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])",
  workflow_instances_intent_type_check:
    "intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])",
  workflow_instances_state_check:
    "state::text = any ('{created,running,waiting_crm,waiting_retry,waiting_manual,succeeded,failed,cancelled}'::text[])",
  workflow_instances_finished:
    "(state::text = any ('{succeeded,failed,cancelled}'::text[])) = (finished_at is not null)",
  workflow_instances_lease: "(lease_token is null) = (locked_until is null)",
  workflow_instances_held_intent:
    "held_intent_type is null or held_intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])",
  workflow_instances_attempt_count_check: "attempt_count >= 0",
  workflow_instances_revision_check: "revision >= 1",
  workflow_instances_processed_revision_check: "processed_revision >= 0",
  workflow_instances_trace_context_chk: "trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'",
};

const TRACE = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01";
const BASE = {
  workflow_type: "contact.update",
  intent_type: "contact.update",
  state: "created",
  finished_at: null as Date | null,
  lease_token: null as string | null,
  locked_until: null as Date | null,
  held_intent_type: null as string | null,
  attempt_count: 0,
  revision: 1,
  processed_revision: 0,
  trace_context: TRACE as string | null,
};
type Row = typeof BASE;

/** Rows that each CHECK admits and refuses, a few columns away from BASE each. */
const PROBES: Partial<Row>[] = [
  {},
  { workflow_type: "contact.rebind", intent_type: "contact.rebind" },
  { workflow_type: "contact.read" },
  { intent_type: "bogus" },
  { state: "running" },
  { state: "bogus" },
  { state: "succeeded" },
  { state: "succeeded", finished_at: new Date() },
  { state: "failed", finished_at: new Date() },
  { finished_at: new Date() },
  { lease_token: "0c0c0c0c-0000-4000-8000-0000000000f1", locked_until: new Date() },
  { lease_token: "0c0c0c0c-0000-4000-8000-0000000000f2" },
  { locked_until: new Date() },
  { held_intent_type: "contact.deactivate" },
  { held_intent_type: "contact.rebind" },
  { attempt_count: -1 },
  { attempt_count: 7 },
  { revision: 0 },
  { revision: 3, processed_revision: 2 },
  { processed_revision: -1 },
  { trace_context: null },
  { trace_context: "00-xyz" },
  { trace_context: "01-0123456789abcdef0123456789abcdef-0123456789abcdef-01" },
];

const COLUMNS = Object.keys(BASE) as (keyof Row)[];

/** Runs one statement in a savepoint: "admitted", or the refusal's SQLSTATE and constraint name. */
async function verdict(c: pg.PoolClient, sql: string, params: unknown[]): Promise<string> {
  await c.query("savepoint probe");
  try {
    await c.query(sql, params);
    await c.query("release savepoint probe");
    return "admitted";
  } catch (e) {
    await c.query("rollback to savepoint probe");
    const err = e as { code?: string; constraint?: string };
    return `${err.code} ${err.constraint}`;
  }
}

test("workflow_instances has no CHECK left; each former one is a trigger enabled always, on INSERT and UPDATE OF its columns", async (t) => {
  const checks = await db.pool.query(
    "select conname from pg_constraint where contype = 'c' and conrelid = 'bitrix_sync.workflow_instances'::regclass",
  );
  t.deepEqual(checks.rows, []);
  const { rows } = await db.pool.query<{ name: string; enabled: string; def: string; constraint: string }>(
    `select tgname as name, tgenabled as enabled, pg_get_triggerdef(oid) as def,
            encode(tgargs, 'escape') as constraint
       from pg_trigger where tgrelid = 'bitrix_sync.workflow_instances'::regclass and tgname like '\\_980\\_check\\_%'
      order by tgname`,
  );
  t.deepEqual(rows.map((r) => r.constraint.split("\\000")[0]).sort(), Object.keys(DROPPED).sort());
  for (const r of rows) {
    t.is(r.enabled, "A", `${r.name} fires with session_replication_role = replica too`);
    t.regex(
      r.def,
      /^CREATE TRIGGER \S+ BEFORE INSERT OR UPDATE OF [a-z_, ]+ ON bitrix_sync\.workflow_instances FOR EACH ROW WHEN \(\(NOT /,
    );
  }
  // Every other BEFORE trigger runs first (names sort before _980_), so the checks judge the final row.
  const later = await db.pool.query(
    `select tgname from pg_trigger where tgrelid = 'bitrix_sync.workflow_instances'::regclass and not tgisinternal
        and (tgtype & 2) = 2 and tgname > '_980_check_' and tgname not like '\\_980\\_check\\_%'`,
  );
  t.deepEqual(later.rows, []);
});

test("each trigger admits and refuses the rows its CHECK did, on INSERT and on UPDATE, by the same name", async (t) => {
  // The dropped rules, as CHECKs of a copy of the table: the reference each row is judged against.
  const c = await db.pool.connect();
  try {
    await c.query("create temp table wf_reference (like bitrix_sync.workflow_instances including defaults)");
    for (const [name, rule] of Object.entries(DROPPED))
      await c.query(`alter table wf_reference add constraint ${name} check (${rule})`);
    await c.query("begin");
    // The row guards (initial state, transitions) are off, so only the checks decide; the
    // _980_check_ triggers are ENABLE ALWAYS and still fire.
    await c.query("set local session_replication_role = replica");
    const placeholders = COLUMNS.map((_, i) => `$${i + 2}`).join(", ");
    const set = COLUMNS.map((col, i) => `${col} = $${i + 2}`).join(", ");
    let refused = 0;
    for (const probe of PROBES) {
      const row = { ...BASE, ...probe };
      const values = COLUMNS.map((col) => row[col]);
      const label = JSON.stringify(probe);
      const ins = `(id, user_id, ${COLUMNS.join(", ")}) values ($1, gen_random_uuid(), ${placeholders})`;
      const id = crypto.randomUUID();
      const expected = await verdict(c, `insert into wf_reference ${ins}`, [id, ...values]);
      t.is(
        await verdict(c, `insert into bitrix_sync.workflow_instances ${ins}`, [id, ...values]),
        expected,
        `INSERT ${label}`,
      );
      if (expected !== "admitted") refused++;
      // The same row reached by an UPDATE of every column from an admitted one.
      const from = crypto.randomUUID();
      const base = COLUMNS.map((col) => BASE[col]);
      await c.query(`insert into wf_reference ${ins}`, [from, ...base]);
      await c.query(`insert into bitrix_sync.workflow_instances ${ins}`, [from, ...base]);
      const upd = (table: string) =>
        verdict(c, `update ${table} set ${set} where id = $1`, [from, ...values]);
      t.is(await upd("bitrix_sync.workflow_instances"), await upd("wf_reference"), `UPDATE ${label}`);
    }
    t.true(refused >= 12, `only ${refused} probes were refused: do the probes still reach every rule?`);
    await c.query("rollback");
  } finally {
    c.release();
  }
});

test("a refusal names the check, carries its rule and a hint, and not the row's values", async (t) => {
  const err = await rejectsWith(
    t,
    db.pool.query(
      `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, trace_context)
       values ('contact.update', 'contact.update', gen_random_uuid(), 'secret-PII-0c0c')`,
    ),
    "23514",
  );
  const e = err as typeof err & { constraint?: string; detail?: string; hint?: string; table?: string };
  t.is(e.constraint, "workflow_instances_trace_context_chk");
  t.is(e.table, "workflow_instances");
  t.is(
    e.message,
    'new row for relation "workflow_instances" violates check constraint "workflow_instances_trace_context_chk"',
  );
  t.regex(e.detail ?? "", /traceparent/);
  t.truthy(e.hint);
  t.false(JSON.stringify(e).includes("secret-PII"), "the refused value is in the error");
});

test("a check is read when a statement writes its columns, not when it writes others", async (t) => {
  // A row that breaks the lease rule, written with its trigger off (the owner's explicit act):
  // an UPDATE of other columns leaves it be, as a NOT VALID CHECK left existing rows.
  const wf = (
    await forceInsert(db.pool, "bitrix_sync.workflow_instances", {
      user_id: "0c0c0c0c-0000-4000-8000-0000000000f9",
      workflow_type: "contact.update",
      intent_type: "contact.update",
    })
  ).id as string;
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("alter table bitrix_sync.workflow_instances disable trigger _980_check_lease");
    await c.query("update bitrix_sync.workflow_instances set lease_token = gen_random_uuid() where id = $1", [
      wf,
    ]);
    await c.query("alter table bitrix_sync.workflow_instances enable always trigger _980_check_lease");
    await c.query("commit");
  } finally {
    c.release();
  }
  await db.pool.query("update bitrix_sync.workflow_instances set step_data = '{\"x\": 1}' where id = $1", [
    wf,
  ]);
  const err = await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.workflow_instances set lease_token = gen_random_uuid() where id = $1", [
      wf,
    ]),
    "23514",
  );
  t.is((err as { constraint?: string }).constraint, "workflow_instances_lease");
});

const TRACEPARENT = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$";

/** Valid traceparents and near misses: every single-character change, deletion and insertion of a few kinds. */
function traceCandidates(): string[] {
  const valid = TRACE;
  const out = new Set<string>([
    valid,
    "00-00000000000000000000000000000000-0000000000000000-00",
    "00-0123456789abcdef0123456789abcdef-0123456789abcdef0-1",
    "00-0123456789abcdef0123456789abcde-f0123456789abcdef-01",
    "00-0123456789ABCDEF0123456789abcdef-0123456789abcdef-01",
    `${valid}\n`,
    `\n${valid}`,
    `${valid}0`,
    valid.slice(0, -1),
    "00--0123456789abcdef0123456789abcdef0123456789abcdef-01",
    "00-0123456789abcdef0123456789abcdef--123456789abcdef-01",
    "",
    "nonsense",
  ]);
  const alphabet = ["-", "0", "f", "g", "A", " ", "é"];
  for (let i = 0; i < valid.length; i++) {
    for (const ch of alphabet) {
      out.add(valid.slice(0, i) + ch + valid.slice(i + 1));
      out.add(valid.slice(0, i) + ch + valid.slice(i));
    }
    out.add(valid.slice(0, i) + valid.slice(i + 1));
  }
  // Random strings of the right length over the characters that matter.
  for (let n = 0; n < 300; n++) out.add(Array.from({ length: 55 }, () => "0f-"[randomInt(0, 3)]).join(""));
  return [...out];
}

test("_trace_context without counted repetition passes exactly what the regular expression passed, as the table check does", async (t) => {
  const candidates = traceCandidates();
  // _trace_context(): the old body, inline, against the function as migrated.
  const fn = await db.pool.query<{ s: string; form: boolean; old: string | null; now: string | null }>(
    `select s, s ~ $2 as form,
            case when s ~ $2 and substr(s, 4, 32) <> repeat('0', 32) and substr(s, 37, 16) <> repeat('0', 16)
                 then s end as old,
            bitrix_sync._trace_context(s) as now
       from unnest($1::text[]) s`,
    [candidates, TRACEPARENT],
  );
  t.deepEqual(
    fn.rows.filter((r) => r.old !== r.now).map((r) => JSON.stringify(r.s)),
    [],
    "_trace_context differs",
  );
  t.true(fn.rows.filter((r) => r.now !== null).length >= 40, "too few candidates pass: the probe is off");

  // The workflow table's check, by an UPDATE of one row (the row guards off; the check is ENABLE ALWAYS).
  const wf = String(
    (
      await forceInsert(db.pool, "bitrix_sync.workflow_instances", {
        user_id: "0c0c0c0c-0000-4000-8000-0000000000fa",
        workflow_type: "contact.update",
        intent_type: "contact.update",
      })
    ).id,
  );
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local session_replication_role = replica");
    const refused = "23514 workflow_instances_trace_context_chk";
    const wrong: string[] = [];
    for (const { s: value, form } of fn.rows) {
      const got = await verdict(
        c,
        "update bitrix_sync.workflow_instances set trace_context = $2 where id = $1",
        [wf, value],
      );
      if (got !== (form ? "admitted" : refused)) wrong.push(`${JSON.stringify(value)}: ${got}`);
    }
    t.deepEqual(wrong, [], "the table's check and the regular expression disagree");
    await c.query("rollback");
  } finally {
    c.release();
  }
});

test("_check_code without counted repetition refuses exactly what the regular expression refused", async (t) => {
  const OLD = "^[a-z0-9][a-z0-9_.]{0,63}$";
  const candidates = [
    "",
    "a",
    "crm_timeout",
    "crm.timeout_2",
    "0abc",
    "_abc",
    ".abc",
    "Abc",
    "a-b",
    "a b",
    "a\n",
    "\na",
    "é",
    "a".repeat(63),
    "a".repeat(64),
    "a".repeat(65),
    `${"a".repeat(64)}\n`,
    `a${"_".repeat(63)}`,
    `a${"_".repeat(64)}`,
  ];
  const wrong: string[] = [];
  for (const s of candidates) {
    const expected = (await db.pool.query<{ ok: boolean }>("select $1::text ~ $2 as ok", [s, OLD])).rows[0]
      ?.ok;
    let accepted = true;
    try {
      await db.pool.query("select bitrix_sync._check_code($1)", [s]);
    } catch (e) {
      t.is((e as { code?: string }).code, "BS004");
      accepted = false;
    }
    if (accepted !== expected) wrong.push(JSON.stringify(s));
  }
  t.deepEqual(wrong, []);
});

test("metric_events has no CHECK: its only writers are the counter triggers, each naming a machine the totals admit", async (t) => {
  const checks = await db.pool.query(
    "select conname from pg_constraint where conrelid = 'bitrix_sync.metric_events'::regclass",
  );
  t.deepEqual(checks.rows, []);
  // No role may write it but the owner, whose security definer counter triggers append to it.
  const grants = await db.pool.query(
    `select grantee, privilege_type from information_schema.role_table_grants
      where table_schema = 'bitrix_sync' and table_name = 'metric_events'
        and grantee <> (select pg_get_userbyid(relowner) from pg_class where oid = 'bitrix_sync.metric_events'::regclass)`,
  );
  t.deepEqual(grants.rows, []);
  const { rows } = await db.pool.query<{ fn: string; secdef: boolean; machine: string | null }>(
    `select p.oid::regprocedure::text as fn, p.prosecdef as secdef,
            substring(p.prosrc from
              'insert into bitrix_sync\\.metric_events \\(machine, kind, from_state, to_state\\)\\s+(?:values \\(|select )''([a-z_]+)''') as machine
       from pg_proc p
      where p.pronamespace in ('bitrix_sync'::regnamespace, 'han_app'::regnamespace)
        and p.prosrc ~* 'insert\\s+into\\s+bitrix_sync\\.metric_events'
      order by 1`,
  );
  t.deepEqual(
    rows.map((r) => r.fn),
    [
      "bitrix_sync.tg_business_alerts__count_remote_missing()",
      "bitrix_sync.tg_crm_commands__count_transition()",
      "bitrix_sync.tg_technical_dead_letters__count()",
      "bitrix_sync.tg_webhook_inbox__count_coalesced()",
      "bitrix_sync.tg_workflow_instances__count_transition()",
    ],
    "a new writer of metric_events: give it a literal machine and add it here",
  );
  const admitted = await db.pool.query<{ machine: string; ok: boolean }>(
    `select m as machine,
            exists (select 1 from pg_constraint c
                     where c.conrelid = 'bitrix_sync.metric_event_totals'::regclass and c.contype = 'c'
                       and pg_get_constraintdef(c.oid) like '%''' || m || '''%') as ok
       from unnest($1::text[]) m`,
    [rows.map((r) => r.machine ?? "")],
  );
  for (const r of rows) t.true(r.secdef, `${r.fn} is security definer`);
  t.deepEqual(
    admitted.rows.filter((r) => !r.ok).map((r) => r.machine),
    [],
    "a writer names a machine metric_event_totals refuses (or no literal machine at all)",
  );
  t.deepEqual(rows.map((r) => r.machine).sort(), ["alert", "command", "dead_letter", "webhook", "workflow"]);
});
