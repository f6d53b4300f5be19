// The App's side as an adversary (docs/security.md, "The App's tables"). A cluster of its own, shaped
// like production: the App's owner role owns schema han_app and the identity and profile tables,
// with an updated_at trigger and an audit trigger of its own; deploy/postgres/bootstrap.sql's
// app_owner route (the first install with the membership, then again without it); the migrations
// run by bitrix_sync_owner; the service as bitrix_sync_user with its session options, against the
// emulator over HTTP, with real graphile-worker.
//
// Then the App's owner plants code on its tables: a trigger, a rule (ON UPDATE DO ALSO), a CHECK and
// a generated column calling a function, a DEFAULT calling one, and a forced row-security policy.
// The planted function records the role it runs as, the login, whether that role may use schema
// bitrix_sync and read the mappings, and whether it can SET ROLE to the service's role. The
// service's real paths run (the CRM-master write of a created Contact's read and of a robot
// webhook, the workflows' reads, the convergence audit, explain_user, the drift view): no planted
// function ever runs with a role that can read bitrix_sync; a policy makes the service's statement
// fail with app_row_security instead; preflight names every planted object and readiness says
// app_tables_changed; the App's own triggers keep working.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { runConvergenceAudit } from "../../../src/audit/run.js";
import { loadConfig } from "../../../src/config/env.js";
import { type EmbeddedServer, startEmbedded } from "../../../src/db/embedded.js";
import { migrateDatabase } from "../../../src/db/migrate.js";
import { withDatabase } from "../../../src/db/url.js";
import { createApp } from "../../../src/http/app.js";
import { readiness } from "../../../src/http/status.js";
import { receiverConfig } from "../../../src/inbound/config.js";
import { projectRoot } from "../../../src/local/project-root.js";
import { checkDatabase } from "../../../src/preflight/database.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../../helpers/e2e.js";
import { randomPhone } from "../../helpers/factories.js";

const hasPsql = spawnSync("psql", ["--version"]).status === 0;
const run = hasPsql ? test.serial : test.skip;
if (!hasPsql)
  console.warn("app-owner.test.ts: SKIPPED, psql is not installed (apt-get install postgresql-client)");

const OWNER_PASSWORD = "owner-pw-4Hq8Vb2Zx7";
const USER_PASSWORD = "user-pw-6Tm1Rc5Ye9";
/** The App's own triggers, as the operator lists them. */
const KNOWN = "trigger:client_profile:set_updated_at,trigger:client_profile:audit_profile";

let dir: string;
let server: EmbeddedServer | undefined;
let superuser: URL;
let pool: pg.Pool;
let rig: Rig;
let app: ReturnType<typeof createApp>;

/** psql as the cluster's superuser on database han. */
function psql(args: string[]) {
  const u = new URL(withDatabase(superuser.toString(), "han"));
  u.password = "";
  return spawnSync("psql", [`--dbname=${u.toString()}`, "--no-psqlrc", ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", PGPASSWORD: decodeURIComponent(superuser.password) },
  });
}

function as(role: string, password: string): string {
  const u = new URL(withDatabase(superuser.toString(), "han"));
  u.username = role;
  u.password = password;
  return u.toString();
}

const bootstrap = (extra: string[] = []) =>
  psql([
    "-v",
    `owner_password_file=${join(dir, "owner-password")}`,
    "-v",
    `user_password_file=${join(dir, "user-password")}`,
    "-v",
    "app_owner=han_app_owner",
    ...extra,
    "-f",
    join(projectRoot, "deploy", "postgres", "bootstrap.sql"),
  ]);

/** The App's database before bitrix-sync: the stub era's tables (migration 000001's shape), its own. */
const APP_DATABASE = `
create role han_app_owner nologin;
create schema han_app authorization han_app_owner;
set role han_app_owner;
create table han_app.user_identity (
  id uuid primary key default gen_random_uuid(),
  phone_number varchar(16),
  record_status varchar(16) not null default 'active' check (record_status in ('active', 'inactive', 'deleted')),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create table han_app.client_profile (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null unique references han_app.user_identity (id),
  full_name text,
  citizenship text,
  email text,
  foreign_phone text,
  record_status varchar(16) not null default 'active' check (record_status in ('active', 'inactive', 'deleted')),
  source_updated_at timestamptz,
  bitrix_contact_id varchar(128),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
-- The App's own: an updated_at trigger and an audit trigger (security definer: it writes the App's
-- audit table, which nobody else may).
create function han_app.set_updated_at() returns trigger language plpgsql as $$
begin
  new.updated_at := clock_timestamp();
  return new;
end $$;
create trigger set_updated_at before update on han_app.client_profile
  for each row execute function han_app.set_updated_at();
create table han_app.app_audit (user_id uuid, at timestamptz default clock_timestamp(), login text);
create function han_app.audit_profile() returns trigger language plpgsql security definer
set search_path = pg_catalog as $$
begin
  insert into han_app.app_audit (user_id, login) values (new.user_id, session_user);
  return null;
end $$;
create trigger audit_profile after update on han_app.client_profile
  for each row execute function han_app.audit_profile();
reset role;
`;

/** What the App's owner plants: a function that records whose rights it runs with. */
const PROBE = `
set role han_app_owner;
create table han_app.probe_log (
  what text, run_as text, login text, project_schema boolean, read_mapping boolean, set_role text,
  at timestamptz default clock_timestamp()
);
grant insert on han_app.probe_log to public;
create function han_app.probe(p_what text) returns boolean language plpgsql as $$
declare
  v_read boolean;
  v_set text;
  v_as text := current_user;
begin
  begin
    perform 1 from bitrix_sync.entity_external_mapping limit 1;
    v_read := true;
  exception when others then
    v_read := false;
  end;
  -- Only in the service's sessions: elsewhere the test's own superuser session would switch.
  if session_user = 'bitrix_sync_user' then
    begin
      execute 'set local role bitrix_sync_user';
      v_set := 'became ' || current_user;
    exception when others then
      v_set := 'refused ' || sqlstate;
    end;
  end if;
  insert into han_app.probe_log (what, run_as, login, project_schema, read_mapping, set_role)
  values (p_what, v_as, session_user, has_schema_privilege(v_as, 'bitrix_sync', 'USAGE'), v_read, v_set);
  return true;
end $$;
create function han_app.probe_fixed(p_what text, p_value text) returns boolean language plpgsql immutable as $$
begin
  return han_app.probe(p_what);
end $$;
create function han_app.probe_text(p_what text) returns text language plpgsql as $$
begin
  perform han_app.probe(p_what);
  return null;
end $$;
reset role;
`;

const PLANT = `
set role han_app_owner;
create function han_app.probe_trg() returns trigger language plpgsql as $$
begin
  perform han_app.probe('trigger');
  return new;
end $$;
create trigger probe_trg before update on han_app.client_profile for each row execute function han_app.probe_trg();
create rule probe_rule as on update to han_app.client_profile do also select han_app.probe('rule');
alter table han_app.client_profile add constraint probe_check check (han_app.probe_fixed('check', full_name));
alter table han_app.client_profile add column probe_generated boolean
  generated always as (han_app.probe_fixed('generated', full_name)) stored;
alter table han_app.client_profile alter column foreign_phone set default han_app.probe_text('default');
reset role;
delete from han_app.probe_log;
`;

const UNPLANT = `
set role han_app_owner;
drop trigger probe_trg on han_app.client_profile;
drop rule probe_rule on han_app.client_profile;
alter table han_app.client_profile drop constraint probe_check;
alter table han_app.client_profile drop column probe_generated;
alter table han_app.client_profile alter column foreign_phone drop default;
reset role;
`;

test.before(async () => {
  if (!hasPsql) return;
  dir = mkdtempSync(join(tmpdir(), "bitrix-sync-app-owner-"));
  chmodSync(dir, 0o755);
  server = await startEmbedded({ dir: join(dir, "pg"), persistent: false });
  superuser = new URL(server.url);
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  try {
    await c.query("create database han");
  } finally {
    await c.end();
  }
  const url = withDatabase(superuser.toString(), "han");
  pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on("error", () => undefined);
  await pool.query(APP_DATABASE);
  writeFileSync(join(dir, "owner-password"), `${OWNER_PASSWORD}\n`, { mode: 0o600 });
  writeFileSync(join(dir, "user-password"), `${USER_PASSWORD}\n`, { mode: 0o600 });
  // The first install: the released migrations comment on and alter the App's tables, which only
  // their owner may; then the membership is taken back and the rights stay.
  const first = bootstrap(["-v", "app_owner_membership=grant"]);
  if (first.status !== 0) throw new Error(`bootstrap.sql: ${first.stderr}`);
  await migrateDatabase(as("bitrix_sync_owner", OWNER_PASSWORD));
  const again = bootstrap();
  if (again.status !== 0) throw new Error(`bootstrap.sql again: ${again.stderr}`);
  await pool.query("alter role bitrix_sync_owner nocreaterole");
  await pool.query("select * from bitrix_sync.perform_cutover('test')");
  await pool.query(PROBE);
  rig = await startRig({
    db: {
      url,
      name: "han",
      pool,
      async drop() {
        await pool.end();
      },
    },
    asRuntimeRole: true,
    env: { BITRIX_SYNC_APP_TABLE_HOOKS: KNOWN },
  });
  app = createApp({ pool: rig.db.pool, log: rig.runtime.log, receiver: receiverConfig(rig.runtime.config) });
  await rig.startWorker();
});

test.after.always(async () => {
  await rig?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function robot(id: number) {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${id}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[client_endpoint]", `https://${rig.emulator.host}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  const res = await app.request(`/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${id}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: body.toString(),
  });
  return res.status;
}

/** A new App user written as the App writes one (identity and profile in one statement). */
async function appUser(fullName: string): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    `with u as (insert into han_app.user_identity (phone_number) values ($1) returning id)
     insert into han_app.client_profile (user_id, full_name) select id, $2 from u returning user_id as id`,
    [randomPhone(), fullName],
  );
  return rows[0]?.id as string;
}

/** A linked user whose Contact bitrix-sync created; its id and the Contact's. */
async function linkedUser(fullName: string): Promise<{ userId: string; contactId: number }> {
  const userId = await appUser(fullName);
  const wf = await finishedWorkflow(rig, userId, 30_000);
  if (wf.state !== "succeeded") throw new Error(`workflow ${wf.state} ${wf.last_error_code}`);
  const { rows } = await pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [userId],
  );
  return { userId, contactId: Number(rows[0]?.external_id) };
}

interface ProbeRow {
  what: string;
  run_as: string;
  login: string;
  project_schema: boolean;
  read_mapping: boolean;
  set_role: string;
}
const probeLog = async () =>
  (
    await pool.query<ProbeRow>(
      "select what, run_as, login, project_schema, read_mapping, set_role from han_app.probe_log order by at",
    )
  ).rows;

const byId = (r: Awaited<ReturnType<typeof checkDatabase>>, id: string) => r.results.find((c) => c.id === id);
/** Preflight's database checks as a deployment runs them: the service's login, the owner's. */
const preflight = () =>
  checkDatabase(
    loadConfig({
      SECRETS_SOURCE: "env",
      BITRIX_SYNC_DATABASE_URL: rig.serviceUrl,
      BITRIX_SYNC_CRM_REST_WEBHOOK_URL: "https://portal.bitrix24.test/rest/1/app-owner-test/",
      BITRIX_SYNC_PORTAL_HOST: "portal.bitrix24.test",
      BITRIX_SYNC_APP_TABLE_HOOKS: KNOWN,
    }),
    as("bitrix_sync_owner", OWNER_PASSWORD),
  );

run(
  "bootstrap's app_owner route: no membership in the App's owner, its rights WITH GRANT OPTION, the catalogue applies",
  async (t) => {
    const { rows } = await pool.query(
      `select pg_has_role('bitrix_sync_owner', 'han_app_owner', 'MEMBER') as member,
            has_column_privilege('bitrix_sync_owner', 'han_app.client_profile', 'full_name', 'UPDATE WITH GRANT OPTION') as grant_option,
            has_table_privilege('bitrix_sync_owner', 'han_app.client_profile', 'TRIGGER') as trigger,
            (select rolcreaterole from pg_roles where rolname = 'bitrix_sync_owner') as createrole`,
    );
    t.deepEqual(rows, [{ member: false, grant_option: true, trigger: true, createrole: false }]);
    const owner = new pg.Client({ connectionString: as("bitrix_sync_owner", OWNER_PASSWORD) });
    await owner.connect();
    try {
      await owner.query("select bitrix_sync.apply_privileges()");
      t.deepEqual((await owner.query("select * from bitrix_sync.role_privilege_drift")).rows, []);
    } finally {
      await owner.end();
    }
    // Without the grant option the schema owner cannot give the App writer its rights: BS096, named.
    const c = await pool.connect();
    try {
      await c.query("begin");
      await c.query(
        "revoke grant option for update on han_app.client_profile from bitrix_sync_owner cascade",
      );
      await c.query("set local role bitrix_sync_owner");
      const e = await t.throwsAsync(c.query("select bitrix_sync.apply_privileges()"));
      t.is((e as { code?: string }).code, "BS096");
      t.regex((e as Error).message, /UPDATE on han_app\.client_profile/);
      t.regex((e as { hint?: string }).hint ?? "", /bootstrap\.sql .*app_owner/);
    } finally {
      await c.query("rollback");
      c.release();
    }
  },
);

run(
  "preflight: the App's own triggers are known; a membership in the App's owner is a warning with the fix",
  async (t) => {
    const r = await preflight();
    t.is(byId(r, "database.app_tables")?.status, "ok", byId(r, "database.app_tables")?.detail);
    t.is(byId(r, "database.owner")?.status, "ok", byId(r, "database.owner")?.detail);
    t.is(byId(r, "database.grants")?.status, "ok", byId(r, "database.grants")?.detail);
    await pool.query("grant han_app_owner to bitrix_sync_owner");
    try {
      const w = await preflight();
      t.is(byId(w, "database.owner")?.status, "warn");
      t.regex(byId(w, "database.owner")?.detail ?? "", /member of han_app_owner/);
      t.regex(byId(w, "database.owner")?.hint ?? "", /bootstrap\.sql again .*-v app_owner=han_app_owner/);
    } finally {
      await pool.query("revoke han_app_owner from bitrix_sync_owner");
    }
  },
);

run(
  "a trigger, a rule, a CHECK and a generated column on the profile run as the App writer, never with the service's rights",
  async (t) => {
    const before = await linkedUser("Before Planting");
    await pool.query(PLANT);
    t.teardown(() => pool.query(UNPLANT));

    // The CRM-master write of a workflow's read: a new user, a Contact created, its read applied.
    const created = await linkedUser("Created After Planting");
    // The CRM-master write of a robot webhook: a manager renames the Contact.
    const contact = rig.emulator.store.contacts.get(before.contactId);
    if (!contact) throw new Error("no Contact");
    contact.name = "Renamed In CRM";
    contact.updatedTime = Date.now() + 2_000;
    const auditBefore = Number(
      (await pool.query("select count(*) from han_app.app_audit where user_id = $1", [before.userId])).rows[0]
        ?.count,
    );
    const stamped = (
      await pool.query("select updated_at from han_app.client_profile where user_id = $1", [before.userId])
    ).rows[0]?.updated_at as Date;
    t.is(await robot(before.contactId), 200);
    await waitFor(
      async () => {
        const { rows } = await pool.query("select full_name from han_app.client_profile where user_id = $1", [
          before.userId,
        ]);
        return rows[0]?.full_name === "Renamed In CRM";
      },
      20_000,
      "the webhook's write",
    );

    const rows = (await probeLog()).filter((r) => r.login === "bitrix_sync_user");
    const fired = new Set(rows.map((r) => r.what));
    for (const what of ["trigger", "rule", "check", "generated"])
      t.true(fired.has(what), `the planted ${what} fired`);
    t.false(fired.has("default"), "the service never inserts into the App's tables: a DEFAULT has no path");
    for (const r of rows) {
      t.like(r, { run_as: "bitrix_sync_app_writer", project_schema: false, read_mapping: false }, r.what);
      t.regex(r.set_role, /^refused 42501$/, `${r.what}: SET ROLE back to the service is refused`);
    }
    // The App's own triggers work under the writer: the stamp moved, the audit row is there.
    const after = await pool.query(
      "select updated_at, probe_generated from han_app.client_profile where user_id = $1",
      [before.userId],
    );
    const stampedAfter = after.rows[0]?.updated_at as Date | undefined;
    t.true((stampedAfter?.getTime() ?? 0) > stamped.getTime(), "updated_at moved");
    const audited = Number(
      (await pool.query("select count(*) from han_app.app_audit where user_id = $1", [before.userId])).rows[0]
        ?.count,
    );
    t.true(audited > auditBefore, "the App's audit trigger recorded the service's write");
    t.truthy(created.contactId);

    // Preflight names each planted object; readiness says something new appeared.
    const r = await preflight();
    const c = byId(r, "database.app_tables");
    t.is(c?.status, "fail");
    for (const name of [
      "trigger client_profile.probe_trg",
      "rule client_profile.probe_rule",
      "check client_profile.probe_check",
      "generated client_profile.probe_generated",
      "default client_profile.foreign_phone",
    ])
      t.true(c?.detail.includes(name), `${name} named: ${c?.detail}`);
    t.false(c?.detail.includes("set_updated_at"), "the App's own, allowed, are not named");
    t.regex(c?.hint ?? "", /BITRIX_SYNC_APP_TABLE_HOOKS/);
    const src = {
      config: rig.runtime.config,
      health: rig.runtime.health,
      limiter: rig.runtime.crm.limiter,
      settings: rig.runtime.settings,
      appTablesCheckMs: 100,
    };
    const ready = await waitFor(
      async () => {
        const r = await readiness(rig.db.pool, src);
        return r.problems.includes("app_tables_changed") ? r : null;
      },
      10_000,
      "readiness to notice",
    );
    t.is(ready.status, "degraded");
  },
);

run(
  "a forced row-security policy is refused, never run: the service's statements fail with app_row_security",
  async (t) => {
    const linked = await linkedUser("Linked Before The Policy");
    await pool.query(`
    set role han_app_owner;
    alter table han_app.client_profile enable row level security;
    alter table han_app.client_profile force row level security;
    create policy probe_policy on han_app.client_profile using (han_app.probe('policy'));
    reset role;
    delete from han_app.probe_log;
  `);
    t.teardown(() =>
      pool.query(`
      set role han_app_owner;
      drop policy probe_policy on han_app.client_profile;
      alter table han_app.client_profile no force row level security;
      alter table han_app.client_profile disable row level security;
      reset role;
    `),
    );

    // The workflows' reads: a new user's intent cannot be taken, its user cannot be read.
    const userId = await appUser("Under The Policy");
    const intent = await waitFor(
      async () => {
        const { rows } = await pool.query(
          "select status, last_error_code from han_app.sync_queue where entity_id = $1 and last_error_code is not null",
          [userId],
        );
        return rows[0];
      },
      20_000,
      "the intent's failed intake",
    );
    t.is(intent.last_error_code, "app_row_security");
    t.true(
      rig.logs.some((l) => l.includes('"event":"intake.failed"') && l.includes('"code":"app_row_security"')),
    );

    // The CRM-master write of a robot webhook.
    const contact = rig.emulator.store.contacts.get(linked.contactId);
    if (!contact) throw new Error("no Contact");
    contact.name = "Renamed Under The Policy";
    contact.updatedTime = Date.now() + 2_000;
    t.is(await robot(linked.contactId), 200);
    const inbox = await waitFor(
      async () => {
        const { rows } = await pool.query(
          "select last_error_code from bitrix_sync.webhook_inbox where entity_id = $1 and last_error_code is not null",
          [String(linked.contactId)],
        );
        return rows[0];
      },
      20_000,
      "the webhook's failed apply",
    );
    t.is(inbox.last_error_code, "app_row_security");

    // The audit's security definer reads, as the runtime and as the admin.
    const report = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), {
      all: true,
      force: true,
    });
    t.is(report.status, "failed");
    t.is(report.errorCode, "app_row_security");
    const c = await pool.connect();
    try {
      await c.query("begin");
      await c.query("set local role bitrix_sync_admin");
      const e = await t.throwsAsync(c.query("select * from bitrix_sync.explain_user($1)", [linked.userId]));
      t.is((e as { code?: string }).code, "42501");
    } finally {
      await c.query("rollback");
      c.release();
    }

    // Nothing of the policy ran with a role that may read bitrix_sync.
    t.deepEqual(
      (await probeLog()).filter((r) => r.project_schema || r.read_mapping),
      [],
    );
    const r = await preflight();
    const check = byId(r, "database.app_tables");
    t.is(check?.status, "fail");
    t.true(check?.detail.includes("row_security client_profile.forced"), check?.detail);
    t.true(check?.detail.includes("policy client_profile.probe_policy"), check?.detail);
    t.regex(check?.hint ?? "", /cannot be allowed/);
  },
);

run(
  "a view in a table's place, a child table and a project table of han_app with another owner are listed; the latter is never written",
  async (t) => {
    const c = await pool.connect();
    try {
      await c.query("begin");
      await c.query("set local lock_timeout = '5s'");
      await c.query("set local role han_app_owner");
      // The App's owner renames its table and puts a view of the same name in its place, adds a
      // table inheriting from the identity table, and (as the owner of schema han_app) drops the
      // project's journal and makes one of its own.
      await c.query("alter table han_app.client_profile rename to client_profile_real");
      await c.query("create view han_app.client_profile as select * from han_app.client_profile_real");
      await c.query("create table han_app.identity_extra () inherits (han_app.user_identity)");
      await c.query("drop table han_app.sync_queue_journal cascade");
      await c.query(
        "create table han_app.sync_queue_journal (task_type text, user_id uuid, reason text, source_updated_at timestamptz)",
      );
      await c.query("reset role");
      const { rows } = await c.query<{ relation: string; kind: string; name: string; detail: string }>(
        "select relation, kind, name, detail from bitrix_sync.app_table_hooks() where kind in ('relation', 'child', 'owner')",
      );
      t.deepEqual(rows, [
        { relation: "client_profile", kind: "relation", name: "client_profile", detail: "relkind v" },
        {
          relation: "sync_queue_journal",
          kind: "owner",
          name: "sync_queue_journal",
          detail: "owned by han_app_owner, relkind r",
        },
        {
          relation: "user_identity",
          kind: "child",
          name: "han_app.identity_extra",
          detail: "inherits from it",
        },
      ]);
      // The journal in the project's place never runs its code with the project's rights: the App's
      // own write that records an intent (the trigger, security definer) and the fold refuse it.
      await c.query(`set local role han_app_owner;
        create function han_app.probe_journal() returns trigger language plpgsql as $$
        begin perform han_app.probe('journal'); return new; end $$;
        create trigger probe_journal before insert or delete on han_app.sync_queue_journal
          for each row execute function han_app.probe_journal();
        reset role;`);
      const user = await c.query<{ id: string }>("select id from han_app.user_identity limit 1");
      await c.query("savepoint app_write");
      const write = await t.throwsAsync(
        c.query("update han_app.user_identity set phone_number = '+79990000001' where id = $1", [
          user.rows[0]?.id,
        ]),
      );
      t.is((write as { code?: string }).code, "BS097");
      await c.query("rollback to savepoint app_write");
      const fold = await t.throwsAsync(c.query("select bitrix_sync.fold_intent_journal()"));
      t.is((fold as { code?: string }).code, "BS097");
      await c.query("rollback to savepoint app_write");
      const ran = await c.query("select count(*)::int as n from han_app.probe_log where what = 'journal'");
      t.is(ran.rows[0]?.n, 0);
    } finally {
      await c.query("rollback");
      c.release();
    }
  },
);
