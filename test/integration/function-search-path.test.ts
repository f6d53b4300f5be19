// Functions that cannot be made to run someone else's code (docs/security.md, migration 000028).
// A function without a pinned search_path resolves its operators and functions through the caller's
// search_path; where another role may create objects in a schema on that path (public, on databases
// created before PostgreSQL 15 and on several managed services), that role can plant an operator
// that matches better than the built-in one (e.g. `=(varchar, text)`), and it then runs inside the
// project's function as the calling role. Every function of bitrix_sync and han_app pins
// `search_path = pg_catalog, pg_temp`, in its definition in sql/; the few SQL functions that must stay
// inlinable (a SET clause prevents inlining) are listed below, with every operator and name in their
// bodies schema-qualified.
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { sqlFiles } from "../../src/db/migration-layout.js";
import { withDatabase } from "../../src/db/url.js";
import { projectRoot } from "../../src/local/project-root.js";
import { makeUser } from "../helpers/factories.js";
import { asRole, asRoleRolledBack, type ProjectRole } from "../helpers/roles.js";
import { one } from "../helpers/sql-core.js";
import { createTestDb, serverUrl, type TestDb } from "../helpers/testdb.js";

/**
 * The functions left without a pinned search_path, and why (measured by `npm run bench:search-path`;
 * the figures are in migration 000028's header and docs/performance.md). Each is a SQL function that
 * PostgreSQL inlines into its callers on a hot path; with a SET clause it would be planned and run on
 * its own for every call. Their bodies must name everything schema-qualified (checked below).
 */
const UNPINNED: Record<string, string> = {
  // The deadline_at default of workflow_instances and crm_commands: every workflow and command insert.
  "bitrix_sync._retry_deadline(timestamp with time zone)": "inlined into every workflow and command insert",
  // Once per event in accept_webhooks(), the receivers' statement.
  "bitrix_sync._trace_context(text)": "inlined into every inbox, workflow and command insert",
  // The default of the hot tables' UUID keys (migration 000053): every queue row, workflow, mapping.
  "bitrix_sync.time_ordered_uuid()":
    "inlined into every insert of a queue row, workflow, mapping or rebind request",
};

const PIN = "search_path=pg_catalog, pg_temp";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/**
 * What in a SQL function body this check can see resolving through the caller's search_path: an
 * operator not written OPERATOR(pg_catalog.x), a construct that looks an operator up by name (IN,
 * BETWEEN, LIKE, IS DISTINCT FROM, NULLIF, a simple CASE), a function, type or relation named
 * without its schema. Comments and string literals are ignored. A heuristic, not a parser: it knows
 * the shapes the project writes.
 */
function unqualifiedReferences(body: string): string[] {
  const found: string[] = [];
  let s = body
    .replace(/--[^\n]*/g, " ")
    .replace(/\/\*[\s\S]*?\*\//g, " ")
    .replace(/'(?:[^']|'')*'/g, " 'lit' ")
    .toLowerCase();
  s = s.replace(/operator\s*\(\s*pg_catalog\s*\.\s*[^)\s]+\s*\)/g, " qualified_op ");
  // Named arguments (secs => ...) are syntax: neither an operator nor a function.
  s = s.replace(/[a-z_][a-z0-9_]*\s*=>/g, " ");
  for (const m of s.matchAll(/[+\-*/<>=~!@#%^&|`?]+/g)) found.push(`operator ${m[0]}`);
  for (const [re, what] of [
    [/\bin\s*\(/g, "IN (...) looks = up by name"],
    [/\bbetween\b/g, "BETWEEN looks >= and <= up by name"],
    [/\b(i?like|similar)\b/g, "LIKE looks ~~ up by name"],
    [/\bis\s+(not\s+)?distinct\b/g, "IS DISTINCT FROM looks = up by name"],
    [/\bnullif\b/g, "NULLIF looks = up by name"],
    [/\bcase\b(?!\s+when\b)/g, "a simple CASE looks = up by name"],
  ] as const) {
    for (const _ of s.matchAll(re)) found.push(what);
  }
  const syntax = new Set([
    "coalesce",
    "greatest",
    "least",
    "exists",
    "array",
    "values",
    "row",
    "and",
    "or",
    "not",
    "when",
    "then",
    "else",
    "select",
    "where",
    "from",
    "over",
    "filter",
    "as",
    "qualified_op",
    "any",
    "all",
    "in",
  ]);
  for (const m of s.matchAll(/(?<![.\w$])([a-z_][a-z0-9_$]*)\s*\(/g)) {
    const name = m[1] as string;
    if (!syntax.has(name)) found.push(`function ${name}()`);
  }
  // Types: keyword types (integer, double precision, ...) always mean pg_catalog's.
  const keywordTypes =
    /^(integer|int|int4|bigint|smallint|boolean|real|double|numeric|decimal|char|character|varchar|timestamp|time|interval|bit|float)$/;
  for (const m of s.matchAll(/::\s*([a-z_][a-z0-9_]*)(\s*\.)?/g)) {
    if (!m[2] && !keywordTypes.test(m[1] as string)) found.push(`type ${m[1]}`);
  }
  const ctes = new Set(
    [...s.matchAll(/(?:\bwith|,)\s*([a-z_][a-z0-9_]*)\s+as\s*(?:materialized\s*)?\(/g)].map((m) => m[1]),
  );
  for (const m of s.matchAll(/\b(?:from|join)\s+([a-z_][a-z0-9_]*)(\s*\.)?/g)) {
    const name = m[1] as string;
    if (!m[2] && !ctes.has(name) && !["lateral", "unnest"].includes(name)) found.push(`relation ${name}`);
  }
  return found;
}

test("every function of bitrix_sync and han_app pins search_path, or is a listed SQL function whose body names everything schema-qualified", async (t) => {
  const { rows } = await db.pool.query<{
    sig: string;
    config: string[] | null;
    lang: string;
    secdef: boolean;
    body: string;
  }>(
    `select p.oid::regprocedure::text as sig, p.proconfig as config, l.lanname as lang, p.prosecdef as secdef,
            p.prosrc as body
       from pg_proc p
       join pg_namespace n on n.oid = p.pronamespace
       join pg_language l on l.oid = p.prolang
      where n.nspname in ('bitrix_sync', 'han_app')
        and not exists (select 1 from pg_depend d
                         where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
      order by 1`,
  );
  t.true(rows.length > 100, `only ${rows.length} functions: the query found the wrong schemas`);
  const unpinned = rows.filter((r) => !(r.config ?? []).includes(PIN)).map((r) => r.sig);
  t.deepEqual(
    unpinned,
    Object.keys(UNPINNED).sort(),
    "unpinned functions that are not listed (or listed ones now pinned)",
  );
  for (const sig of Object.keys(UNPINNED)) {
    const fn = rows.find((r) => r.sig === sig);
    if (!fn) continue; // reported by the deepEqual above
    t.is(fn.lang, "sql", `${sig}: only SQL functions are inlined; anything else is pinned`);
    t.false(fn.secdef, `${sig}: a security definer function is never inlined; pin it`);
    t.false(
      (fn.config ?? []).some((c) => c.startsWith("search_path=")),
      `${sig}: half pinned`,
    );
    t.deepEqual(unqualifiedReferences(fn.body), [], `${sig} resolves names through the caller's search_path`);
  }
});

test("the check of the unpinned bodies finds what the bodies before migration 000028 left to the caller's search_path", (t) => {
  // The committed migrations keep the earlier bodies: the check must refuse them.
  const committed = join(projectRoot, "migrations", "committed");
  const before = (fn: string, file: string) => {
    const text = readFileSync(join(committed, file), "utf8");
    const m = new RegExp(
      `create or replace function bitrix_sync\\.${fn}\\([\\s\\S]*?\\$\\$([\\s\\S]*?)\\$\\$`,
    ).exec(text);
    if (!m?.[1]) throw new Error(`no ${fn} in ${file}`);
    return m[1];
  };
  t.deepEqual(unqualifiedReferences(before("_trace_context", "000018-trace-context-privileges.sql")), [
    "operator ~",
    "operator <>",
    "operator <>",
    "function substr()",
    "function repeat()",
    "function substr()",
    "function repeat()",
  ]);
  t.deepEqual(unqualifiedReferences(before("_retry_deadline", "000007-one-owner.sql")), [
    "operator +",
    "operator #>>",
    "function make_interval()",
  ]);
  t.deepEqual(
    unqualifiedReferences(
      "select x in ('a') from t where y between 1 and 2 and z is distinct from 'q'::text",
    ),
    [
      "IN (...) looks = up by name",
      "BETWEEN looks >= and <= up by name",
      "IS DISTINCT FROM looks = up by name",
      "type text",
      "relation t",
    ],
  );
});

test("the pin is written in the definitions in sql/ (every folder), so a later migration that includes a file keeps it", (t) => {
  const missing: string[] = [];
  let seen = 0;
  for (const file of sqlFiles()) {
    const text = readFileSync(join(projectRoot, file), "utf8");
    for (const m of text.matchAll(
      /create\s+or\s+replace\s+function\s+([\w.]+)\s*\(([\s\S]*?)\bas\s+\$\$/gi,
    )) {
      seen++;
      const name = m[1] as string;
      const header = m[2] as string;
      const listed = Object.keys(UNPINNED).some((sig) => sig.startsWith(`${name}(`));
      const pinned = /\bset\s+search_path\s*=\s*pg_catalog\s*,\s*pg_temp\b/i.test(header);
      if (pinned === listed)
        missing.push(
          `${file}: ${name} ${listed ? "is listed as unpinned but pins" : "has no set search_path"}`,
        );
    }
  }
  t.true(seen > 100, `only ${seen} function definitions found in sql/`);
  t.deepEqual(missing, []);
});

// The attack: a role that may create objects in public plants operators that match varchar
// comparisons better than the built-in text operators, and records who ran them.
const PLANT = `
  create table public.bs_loot (who text, a text, b text, at timestamptz default clock_timestamp());
  grant insert on public.bs_loot to public;
  create function public.bs_hijack(a varchar, b text) returns boolean
  language plpgsql set search_path = pg_catalog as $$
  begin
    insert into public.bs_loot (who, a, b) values (current_user, a, b);
    return a::text operator(pg_catalog.=) b;
  end $$;
  create function public.bs_hijack(a varchar, b varchar) returns boolean
  language plpgsql set search_path = pg_catalog as $$
  begin
    insert into public.bs_loot (who, a, b) values (current_user, a, b);
    return a::text operator(pg_catalog.=) b::text;
  end $$;
  create operator public.= (leftarg = varchar, rightarg = text, function = public.bs_hijack);
  create operator public.= (leftarg = varchar, rightarg = varchar, function = public.bs_hijack);
`;

test("an operator planted in public by another role never runs inside the project's functions, whoever calls them", async (t) => {
  const planter = `bs_t_planter_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await admin.connect();
  await admin.query(`create role ${planter} nologin`);
  t.teardown(async () => {
    // The role owns objects in this file's database only; they go with it (test.after.always), but
    // the role must outlive them, so drop what it owns here first.
    await db.pool.query(`drop owned by ${planter} cascade`).catch(() => undefined);
    await admin.query(`drop role if exists ${planter}`).catch(() => undefined);
    await admin.end();
  });
  // Set up as the owner before anything is planted: a user, a cutover (createTestDb did it).
  const early = await makeUser(db.pool);

  await db.pool.query(`grant create on schema public to ${planter}`);
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query(`set local role ${planter}`);
    await c.query(PLANT);
    await c.query("commit");
  } finally {
    c.release();
  }

  // Fresh sessions, so no plan cached before the planting is reused; the default search_path.
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  pool.on("error", () => undefined);
  t.teardown(() => pool.end());
  const as = <T>(role: ProjectRole, fn: (c: pg.PoolClient) => Promise<T>, commit = true) =>
    (commit ? asRole : asRoleRolledBack)(pool, role, async (cl) => {
      await cl.query(`set local search_path = "$user", public`);
      return fn(cl);
    });

  // The plant works: a varchar comparison written in a role's own statement picks it.
  await as("bitrix_sync_user", (cl) => cl.query("select 'control'::varchar = 'control'::text"), false);
  const control = await one<{ n: number }>(
    pool,
    "select count(*)::int as n from public.bs_loot where who = 'bitrix_sync_user' and a = 'control'",
  );
  t.is(control.n, 0, "a rolled-back control leaves no row");
  await as("bitrix_sync_user", (cl) => cl.query("select 'control'::varchar = 'control'::text"));
  t.is(
    (await one<{ n: number }>(pool, "select count(*)::int as n from public.bs_loot where a = 'control'")).n,
    1,
    "the planted operator is picked by a statement that names no schema",
  );

  // The App: a new user, a phone change, a deactivation (the enqueue trigger).
  const user = randomUUID();
  await as("han_app_user", async (cl) => {
    await cl.query(
      `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, '+79990001122', 'active') returning id)
       insert into han_app.client_profile (user_id, full_name, record_status) select id, 'Planted Test', 'active' from u`,
      [user],
    );
  });
  await as("han_app_user", (cl) =>
    cl.query(
      "update han_app.user_identity set phone_number = '+79990001133', updated_at = now() where id = $1",
      [user],
    ),
  );

  // The runtime: intake, a workflow step and its command, the mapping, the CRM-master write, the
  // inbox, alerts, the limiter, reconciliation and metrics.
  await as("bitrix_sync_user", async (cl) => {
    const claimed = (
      await cl.query<{ id: string; lease_token: string; entity_id: string; task_type: string }>(
        "select id, lease_token, entity_id, task_type from bitrix_sync.claim_sync_tasks('planted', 10, interval '60 seconds')",
      )
    ).rows;
    t.true(claimed.length >= 2, "the App's intents were claimed");
    await cl.query(
      "select * from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
      [
        claimed.map((r) => r.id),
        claimed.map((r) => r.lease_token),
        claimed.map((r) => r.entity_id),
        claimed.map((r) => r.task_type),
        claimed.map(() => null),
        claimed.map(() => "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
      ],
    );
  });
  await as("bitrix_sync_user", async (cl) => {
    const wf = await one<{ id: string; lease_token: string }>(
      cl,
      "select id, lease_token from bitrix_sync.claim_workflows('planted', 10, interval '60 seconds') where user_id = $1",
      [user],
    );
    await cl.query("select * from bitrix_sync.step_context($1)", [wf.id]);
    await cl.query("select * from bitrix_sync.save_workflow_step($1, $2, '{\"pass\": 1}', 'read_contact')", [
      wf.id,
      wf.lease_token,
    ]);
    await cl.query(
      "select * from bitrix_sync.issue_command($1, $2, 'contact.read', '{\"contact_id\": \"4711\"}', 'read_contact')",
      [wf.id, wf.lease_token],
    );
    const cmd = await one<{ id: string; lease_token: string }>(
      cl,
      "select id, lease_token from bitrix_sync.claim_commands('planted', 10, interval '60 seconds') where workflow_id = $1",
      [wf.id],
    );
    await cl.query("select * from bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3)", [
      [cmd.id],
      [cmd.lease_token],
      randomUUID(),
    ]);
    await cl.query("select * from bitrix_sync.complete_commands($1::bigint[], $2::uuid[], $3::jsonb[])", [
      [cmd.id],
      [cmd.lease_token],
      ['{"id": "4711"}'],
    ]);
    await cl.query("select * from bitrix_sync.active_mapping_for_user($1)", [user]);
    await cl.query("select * from bitrix_sync.open_mapping($1, '4711', $2)", [user, wf.id]);
    await cl.query("select * from bitrix_sync.active_mapping_for_contact('4711')");
    await cl.query("select * from bitrix_sync.record_contact_created('4711', $1, 'n', 'e', 'p', null)", [
      user,
    ]);
    await cl.query(
      `select * from bitrix_sync.apply_crm_master_fields($1, '4711', 'Planted Name', null, null, 'n2', null, null,
                                                          null, true, now(), now(), 'webhook')`,
      [user],
    );
    await cl.query("select * from bitrix_sync.raise_business_alert('duplicate_contacts', 'medium', $1, $2)", [
      createHash("sha256").update(user).digest("hex"),
      user,
    ]);
    await cl.query("select * from bitrix_sync.alerts_to_look_up(20)");
    await cl.query("select * from bitrix_sync.blocked_crm_methods('planted.portal')");
    await cl.query(
      "select * from bitrix_sync.acquire_crm_request('planted.portal', 'h', 2, 5, 2, 30000, 0.05)",
    );
    await cl.query("select * from bitrix_sync.claim_reconciliation_cursor('contacts', interval '0 s', true)");
    await cl.query("select * from bitrix_sync.metrics_snapshot('planted.portal', true)");
  });
  await as("bitrix_sync_user", async (cl) => {
    await cl.query(
      "select * from bitrix_sync.accept_webhooks(array['contact'], array[3], array['4711'], array[null::inet], array[null::text])",
    );
    const hook = await one<{ id: string; lease_token: string }>(
      cl,
      "select id, lease_token from bitrix_sync.claim_webhooks('planted', 10, interval '60 s', 'contact')",
    );
    await cl.query("select * from bitrix_sync.complete_webhook($1, $2, 'applied')", [
      hook.id,
      hook.lease_token,
    ]);
  });

  // The admin: status, parked work, dead letters, retention, settings, a fold.
  await as(
    "bitrix_sync_admin",
    async (cl) => {
      for (const view of [
        "status_queue",
        "status_workflows",
        "status_commands",
        "status_webhooks",
        "status_dead_letters",
        "status_alerts",
        "status_alert_mirror",
        "parked_workflows",
        "rebind_request_status",
      ])
        await cl.query(`select * from bitrix_sync.${view}`);
      await cl.query("select * from bitrix_sync.list_dead_letters()");
      await cl.query("select * from bitrix_sync.retention_preview()");
      await cl.query("select bitrix_sync.fold_intent_journal()");
      await cl.query("select bitrix_sync.propose_settings('{\"batch.size\": 25}', 'ops:planted')");
      await cl.query("select * from bitrix_sync.metrics_snapshot(null, true)");
      await cl.query("select bitrix_sync.cutover_performed()");
    },
    false,
  );

  const { rows } = await pool.query<{ who: string; n: number }>(
    `select who, count(*)::int as n from public.bs_loot
      where who in ('bitrix_sync_user', 'bitrix_sync_admin', 'han_app_user') and a <> 'control'
      group by who order by who`,
  );
  t.deepEqual(rows, [], "the planted operator ran inside the project's functions");
  t.truthy(early.id);
});
