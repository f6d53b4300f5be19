// `npm run preflight` against a deployment made of real parts: the emulator as the portal over
// loopback (through the service's own CRM client), a migrated PostgreSQL, secret files, the nginx
// renderer and a real `nginx -t`. Correct, it exits 0; each mistake makes it exit non-zero and name
// what is wrong; its output never holds a secret, the webhook URL or a Contact's data.
import { randomBytes } from "node:crypto";
import { chmodSync } from "node:fs";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { releaseSchema } from "../../../src/db/schema-window.js";
import {
  type CheckResult,
  formatReport,
  type PreflightReport,
  runPreflight,
} from "../../../src/preflight/index.js";
import { hasNginx } from "../../helpers/nginx.js";
import { ALERT_SETTINGS, type Deployment, deployment, SAMPLE_PHONE } from "../../helpers/preflight.js";
import { runProcess } from "../../helpers/run-process.js";
import { setSettings } from "../../helpers/settings.js";
import { createEmptyDb, createOwnedTestDb, createTestDb, type OwnedTestDb } from "../../helpers/testdb.js";

let db: OwnedTestDb;
const open: Deployment[] = [];
test.before(async () => {
  // No cutover yet: preflight runs before it (§17 step 7), which is a warning while disabled.
  // Migrated by a schema owner that is not a superuser, as deploy/postgres/bootstrap.sql makes it.
  db = await createOwnedTestDb({ cutover: false });
  await setSettings(db, ALERT_SETTINGS);
});
test.after.always(async () => {
  await Promise.all(open.map((d) => d.close()));
  await db?.drop();
});

async function deploy(
  opts: Omit<Parameters<typeof deployment>[0], "databaseUrl"> & { databaseUrl?: string } = {},
) {
  // The owner's connection belongs to this file's database; another database is its own owner's.
  const owner = opts.databaseUrl === undefined ? { ownerUrl: db.ownerUrl } : {};
  const d = await deployment({ databaseUrl: db.url, ...owner, ...opts });
  open.push(d);
  return d;
}

function byId(r: PreflightReport, id: string): CheckResult {
  const c = r.results.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
}

/** The text a person would read, checked for every secret, the webhook URL and the sample phone. */
function assertNoSecrets(t: ExecutionContext, d: Deployment, text: string) {
  for (const s of d.secrets) t.false(text.includes(s), "a secret value in the output");
  t.false(text.includes(d.emulator.secret), "the webhook's secret in the output");
  t.false(text.includes("/rest/1/"), "the webhook URL's path in the output");
  t.false(text.includes(SAMPLE_PHONE.slice(2)), "a Contact's phone in the output");
}

async function preflight(t: ExecutionContext, d: Deployment): Promise<PreflightReport> {
  const r = await runPreflight(d.env);
  const text = formatReport(r) + JSON.stringify(r);
  assertNoSecrets(t, d, text);
  t.log(formatReport(r));
  return r;
}

test("a correct deployment passes: exit 0, every check ok or a warning", async (t) => {
  const d = await deploy();
  const r = await preflight(t, d);
  t.is(r.exitCode, 0);
  for (const c of r.results)
    t.true(c.status === "ok" || c.status === "warn", `${c.id}: ${c.status} ${c.detail}`);
  t.is(byId(r, "portal.contact_fields").status, "ok");
  t.is(byId(r, "portal.alert_process").status, "ok");
  t.is(byId(r, "database.grants").status, "ok");
  t.is(byId(r, "database.cutover").status, "warn");
  t.regex(
    byId(r, "portal.probe_registered_form").detail,
    /crm\.contact\.list returns string "1"\/"0", crm\.item\.list returns string "Y"\/"N"/,
  );
  t.regex(byId(r, "portal.probe_date_modify").detail, /same instant/);
  t.regex(byId(r, "portal.probe_opened_filter").detail, /opened=Y returns Contacts/);
  t.regex(byId(r, "portal.member_id").detail, /cannot confirm/);
  if (hasNginx) t.is(byId(r, "proxy.nginx_config").status, "ok");
});

test("a Contact field missing on the portal fails and names the variable", async (t) => {
  const d = await deploy({ emulator: { userFieldTypes: { registered: null } } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "portal.contact_fields");
  t.is(c.status, "fail");
  t.regex(
    c.detail,
    new RegExp(`BITRIX_SYNC_CONTACT_REGISTERED_FIELD=${SANDBOX_FIELDS.registered} does not exist`),
  );
});

test("a mistyped field, and a list without items, fail", async (t) => {
  const d = await deploy({ emulator: { userFieldTypes: { userId: "double" }, citizenship: [] } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "portal.contact_fields");
  t.is(c.status, "fail");
  t.regex(c.detail, /BITRIX_SYNC_CONTACT_USER_ID_FIELD=\S+ is of type double, needs string/);
  t.regex(c.detail, /BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD=\S+ is a list without items/);
});

test("a citizenship field that is not a list fails", async (t) => {
  const d = await deploy({ emulator: { userFieldTypes: { citizenship: "string" } } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  t.regex(
    byId(r, "portal.contact_fields").detail,
    /CITIZENSHIP_FIELD=\S+ is of type string, needs enumeration/,
  );
});

test("a member ID that is not one fails", async (t) => {
  const d = await deploy({ env: { BITRIX_SYNC_PORTAL_MEMBER_ID: "my-portal" } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "portal.member_id");
  t.is(c.status, "fail");
  t.regex(c.detail, /BITRIX_SYNC_PORTAL_MEMBER_ID does not look like a portal member ID/);
  t.false(c.detail.includes("my-portal"));
});

test("a revoked credential is named; the checks behind it are not claimed (exit 2)", async (t) => {
  const d = await deploy();
  d.emulator.revokeCredential();
  const r = await preflight(t, d);
  t.is(r.exitCode, 2);
  const c = byId(r, "portal.credential");
  t.is(c.status, "fail");
  t.regex(c.detail, /rejected the webhook credential \(INVALID_CREDENTIALS, HTTP 401\)/);
  t.is(byId(r, "portal.contact_fields").status, "unknown");
});

test("a webhook without the crm scope fails on the credential and on every method", async (t) => {
  const d = await deploy({ emulator: { scopes: ["user"] } });
  const r = await preflight(t, d);
  t.is(byId(r, "portal.credential").status, "fail");
  t.regex(byId(r, "portal.credential").detail, /lacks the crm scope/);
  const m = byId(r, "portal.methods");
  t.is(m.status, "fail");
  t.regex(m.detail, /not allowed by the webhook's scopes: crm\.contact\.add, /);
  t.not(r.exitCode, 0);
});

test("an empty allow-list while the receivers are enabled fails", async (t) => {
  const d = await deploy({ env: { BITRIX_WEBHOOK_ALLOWED_CIDRS: "" } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "proxy.allow_list");
  t.is(c.status, "fail");
  t.regex(c.detail, /BITRIX_WEBHOOK_ALLOWED_CIDRS: empty while the receivers are enabled/);
  // The rest of the nginx configuration is still tested.
  if (hasNginx) t.is(byId(r, "proxy.nginx_config").status, "ok");
});

test("a world-readable secret file fails and names the file", async (t) => {
  const d = await deploy();
  chmodSync(join(d.secretsDir, "BITRIX_SYNC_SERVICE_TOKEN"), 0o644);
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "config.secret_files");
  t.is(c.status, "fail");
  t.regex(c.detail, /readable beyond the service's user: BITRIX_SYNC_SERVICE_TOKEN \(mode 0644\)/);
});

test("a stub-era variable left over fails", async (t) => {
  const d = await deploy({
    env: { BITRIX_SYNC_CRM_BASE_URL: "https://old.example", CONTACT_SYNC_INTERVAL_SEC: "60" },
  });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  t.regex(byId(r, "config.stub_era").detail, /BITRIX_SYNC_CRM_BASE_URL, CONTACT_SYNC_INTERVAL_SEC/);
});

test("an invalid configuration: nothing else can be checked (exit 2)", async (t) => {
  const d = await deploy({ env: { BITRIX_SYNC_CONTACT_USER_ID_FIELD: "userid" } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 2);
  t.is(byId(r, "config.variables").status, "fail");
  t.regex(
    byId(r, "config.variables").detail,
    /BITRIX_SYNC_CONTACT_USER_ID_FIELD: must look like UF_CRM_<digits>/,
  );
  t.is(byId(r, "database.reachable").status, "unknown");
});

test("what enabling will require is checked while still disabled", async (t) => {
  const d = await deploy({ env: { BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: undefined } });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  t.regex(
    byId(r, "config.variables").detail,
    /BITRIX_SYNC_ENABLED=true would be refused: BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: required when BITRIX_SYNC_ENABLED=true/,
  );
});

test("enabled without a cutover fails on the cutover", async (t) => {
  const d = await deploy({ env: { BITRIX_SYNC_ENABLED: "true" } });
  const r = await preflight(t, d);
  t.is(byId(r, "database.cutover").status, "fail");
  t.regex(byId(r, "database.cutover").hint ?? "", /perform_cutover/);
  t.is(r.exitCode, 1);
});

test("the database unreachable: exit 2, the database checks not claimed", async (t) => {
  const d = await deploy({ databaseUrl: "postgres://postgres@127.0.0.1:1/none" });
  const r = await preflight(t, d);
  t.is(r.exitCode, 2);
  t.is(byId(r, "database.reachable").status, "unknown");
  t.regex(byId(r, "database.reachable").detail, /could not connect to 127\.0\.0\.1:1/);
  t.is(byId(r, "database.migrations").status, "unknown");
  t.is(byId(r, "portal.alert_process").status, "unknown");
});

test("a database that is not migrated fails on the migrations", async (t) => {
  const empty = await createEmptyDb();
  t.teardown(() => empty.drop());
  const d = await deploy({ databaseUrl: empty.url });
  const r = await preflight(t, d);
  t.not(r.exitCode, 0);
  const c = byId(r, "database.migrations");
  t.is(c.status, "fail");
  t.regex(c.detail, /not migrated/);
  t.is(byId(r, "database.worker_schema").status, "fail");
});

test("the schema inside this release's window passes; a contract step past it fails and names the window", async (t) => {
  const own = releaseSchema().number;
  const ok = byId(await preflight(t, await deploy({})), "database.migrations");
  t.is(ok.status, "ok");
  t.regex(
    ok.detail,
    new RegExp(`^current: schema ${own} .*no contract step\\), inside this release's window: schema ${own}`),
  );
  const contracted = await createTestDb();
  t.teardown(() => contracted.drop());
  await contracted.pool.query(
    `insert into bitrix_sync.schema_contract_steps (migration, oldest_release_schema, what)
     values ('999999', '999998', 'drops what releases before 999998 read (a test)')`,
  );
  const r = await preflight(t, await deploy({ databaseUrl: contracted.url }));
  const c = byId(r, "database.migrations");
  t.is(c.status, "fail");
  t.regex(c.detail, /^contracted: .*contract step 999999 needs a release whose schema is 999998 or later/);
  t.regex(c.hint ?? "", /Rolling back/);
  t.not(r.exitCode, 0);
});

test("drifted grants fail and name the difference", async (t) => {
  const drifted = await createTestDb();
  t.teardown(() => drifted.drop());
  await setSettings(drifted, ALERT_SETTINGS);
  await drifted.pool.query("grant select on bitrix_sync.crm_commands to han_app_user");
  const d = await deploy({ databaseUrl: drifted.url });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "database.grants");
  t.is(c.status, "fail");
  t.regex(c.detail, /extra SELECT on table bitrix_sync\.crm_commands for han_app_user/);
  t.is(byId(r, "database.cutover").status, "ok");
});

test("a privilege held by a role outside the catalogue fails and names the role", async (t) => {
  // The role is cluster-wide but holds nothing outside this test's own database, so no other test
  // (nor another database's drift check) sees it.
  const reporting = `bs_reporting_${randomBytes(4).toString("hex")}`;
  const drifted = await createTestDb();
  t.teardown(async () => {
    await drifted.drop();
    await db.pool.query(`drop role if exists ${reporting}`);
  });
  await setSettings(drifted, ALERT_SETTINGS);
  await drifted.pool.query(`create role ${reporting} nologin`);
  await drifted.pool.query(`grant select on bitrix_sync.entity_external_mapping to ${reporting}`);
  const d = await deploy({ databaseUrl: drifted.url });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "database.grants");
  t.is(c.status, "fail");
  t.regex(
    c.detail,
    new RegExp(`extra SELECT on table bitrix_sync\\.entity_external_mapping for ${reporting}`),
  );
  t.regex(c.hint ?? "", /revoke/);
});

test("an alert smart process that does not match the settings fails", async (t) => {
  const d = await deploy({
    emulator: {
      smartProcesses: [
        {
          entityTypeId: 1040,
          typeId: 14,
          categoryId: 7,
          stages: ["DT1040_7:NEW", "DT1040_7:WON", "DT1040_7:FAIL"],
          fields: ["ufCrm14_1001"],
        },
      ],
    },
  });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "portal.alert_process");
  t.is(c.status, "fail");
  t.regex(c.detail, /field ufCrm14_1002 \(alerts\.fields\.fingerprint\) does not exist/);
  t.regex(c.detail, /stage DT1040_7:SUCCESS \(alerts\.stage_resolved\) is not a stage of category 7/);
});

test("the opened filter probe says which value returns Contacts", async (t) => {
  const other = await createTestDb();
  t.teardown(() => other.drop());
  await setSettings(other, { ...ALERT_SETTINGS, "reconcile.opened_filter": "1" });
  const d = await deploy({ databaseUrl: other.url });
  const r = await preflight(t, d);
  const c = byId(r, "portal.probe_opened_filter");
  t.is(c.status, "fail");
  t.regex(c.detail, /opened=1 returns no Contact although Contacts exist; opened=Y does return some/);
  t.regex(c.hint ?? "", /set reconcile\.opened_filter to Y/);
});

test("as a process: `npm run preflight`'s command, text and --json, exit codes and no secrets", async (t) => {
  const d = await deploy();
  const text = await runProcess(process.execPath, ["--import", "tsx", "scripts/preflight.ts"], d.env, 60_000);
  t.is(text.code, 0, text.stdout + text.stderr);
  t.regex(text.stdout, /^ok +config\.variables/m);
  t.regex(text.stdout, /preflight: \d+ ok, \d+ warning\(s\), 0 failed, 0 not checked; exit 0/);
  assertNoSecrets(t, d, text.stdout + text.stderr);

  d.emulator.revokeCredential();
  const json = await runProcess(
    process.execPath,
    ["--import", "tsx", "scripts/preflight.ts", "--json"],
    d.env,
    60_000,
  );
  t.is(json.code, 2);
  const parsed = JSON.parse(json.stdout) as PreflightReport;
  t.is(parsed.exitCode, 2);
  t.is(byId(parsed, "portal.credential").status, "fail");
  assertNoSecrets(t, d, json.stdout + json.stderr);
});

test("the project owned by a superuser fails on the owner", async (t) => {
  // createTestDb's template is migrated by the test server's superuser.
  const superuserOwned = await createTestDb();
  t.teardown(() => superuserOwned.drop());
  await setSettings(superuserOwned, ALERT_SETTINGS);
  const d = await deploy({ databaseUrl: superuserOwned.url });
  const r = await preflight(t, d);
  t.is(r.exitCode, 1);
  const c = byId(r, "database.owner");
  t.is(c.status, "fail");
  t.regex(c.detail, /owned by a superuser \(\w+\), \d+ of them security definer/);
  t.regex(c.hint ?? "", /bootstrap\.sql/);
});

test("a non-superuser owner passes; with CREATEROLE on PostgreSQL 15 it is a warning", async (t) => {
  const d = await deploy();
  const r = await preflight(t, d);
  const c = byId(r, "database.owner");
  const version = Number(
    (await db.pool.query<{ v: string }>("select current_setting('server_version_num') as v")).rows[0]?.v,
  );
  // The owner of createOwnedTestDb keeps CREATEROLE (the migrations needed it).
  t.is(c.status, version < 160000 ? "warn" : "ok", c.detail);
  t.regex(c.detail, new RegExp(db.owner));
  if (version < 160000) t.regex(c.hint ?? "", /NOCREATEROLE/);
});

test("a database URL off loopback without sslmode=verify-full fails on TLS", async (t) => {
  const remote = "postgres://bitrix_sync_user:pw@db.internal.example:5432/han?sslmode=require";
  const d = await deploy({ env: { MIGRATION_DATABASE_URL: remote } });
  const r = await preflight(t, d);
  const c = byId(r, "database.tls");
  t.is(c.status, "fail");
  t.is(c.detail, "not on loopback and not sslmode=verify-full: MIGRATION_DATABASE_URL (sslmode=require)");
  t.is(r.exitCode, 2, "the owner's connection does not answer either: database.grants is not checked");
  const ok = await deploy({
    env: { MIGRATION_DATABASE_URL: remote.replace("sslmode=require", "sslmode=verify-full") },
  });
  t.is(byId(await preflight(t, ok), "database.tls").status, "ok");
});

test.serial(
  "a schema on the search path that others may create in: a warning on the default path, a failure on the service's",
  async (t) => {
    const d = await deploy();
    const before = await preflight(t, d);
    t.is(byId(before, "database.search_path").status, "ok");
    t.regex(byId(before, "database.search_path").detail, /the service's search path is pg_catalog/);
    // public writable by everyone, as before PostgreSQL 15: the default path "$user", public has it.
    await db.pool.query("grant create on schema public to public");
    try {
      const open = await preflight(t, d);
      const c = byId(open, "database.search_path");
      t.is(c.status, "warn");
      t.regex(
        c.detail,
        /a session's default path \(public: .*\) has schemas other roles may create in: public \(.*bitrix_sync_user/,
      );
      // A schema on the service's own path: only pg_catalog there, so grant on it (this database only).
      await db.pool.query("grant create on schema pg_catalog to bitrix_sync_admin");
      try {
        const bad = await preflight(t, d);
        const f = byId(bad, "database.search_path");
        t.is(f.status, "fail");
        t.regex(f.detail, /pg_catalog \(bitrix_sync_admin\)/);
        t.is(bad.exitCode, 1);
      } finally {
        await db.pool.query("revoke create on schema pg_catalog from bitrix_sync_admin");
      }
    } finally {
      await db.pool.query("revoke create on schema public from public");
    }
  },
);

test("with sync enabled, business alerts that cannot reach the portal fail; alerts.database_only says they stay in the database", async (t) => {
  // A deployment after the cutover, alerts not configured (the catalogue's defaults).
  // Owned by a non-superuser, as a deployment is (database.owner would fail otherwise).
  const other = await createOwnedTestDb();
  t.teardown(() => other.drop());
  const enabled = await deploy({ databaseUrl: other.url, env: { BITRIX_SYNC_ENABLED: "true" } });
  let r = await preflight(t, enabled);
  let c = byId(r, "portal.alert_process");
  t.is(c.status, "fail");
  t.regex(c.detail, /BITRIX_SYNC_ENABLED=true but alerts\.entity_type_id is not set/);
  t.regex(c.hint ?? "", /alerts\.database_only/);
  t.is(r.exitCode, 1);

  // Still disabled: what enabling will demand, as a warning.
  const disabled = await deploy({ databaseUrl: other.url });
  c = byId(await preflight(t, disabled), "portal.alert_process");
  t.is(c.status, "warn");
  t.regex(c.detail, /could not reach the portal once sync is enabled/);

  // Configured, but the smart process is not on the portal.
  await setSettings(other, { ...ALERT_SETTINGS, "alerts.entity_type_id": 1052 });
  r = await preflight(t, enabled);
  c = byId(r, "portal.alert_process");
  t.is(c.status, "fail");
  t.regex(c.detail, /smart process 1052 \(alerts\.entity_type_id\) cannot be read/);
  t.is(r.exitCode, 1);

  // Kept in the database on purpose: a warning, never a failure.
  await setSettings(other, { "alerts.entity_type_id": null, "alerts.database_only": true });
  r = await preflight(t, enabled);
  c = byId(r, "portal.alert_process");
  t.is(c.status, "warn");
  t.regex(c.detail, /alerts\.database_only is true/);
  t.is(
    r.exitCode,
    0,
    r.results
      .filter((x) => x.status !== "ok" && x.status !== "warn")
      .map((x) => x.id)
      .join(", "),
  );
});
