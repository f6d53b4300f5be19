// The schema owner is not a superuser (docs/deployment.md, "The database roles"): on a fresh cluster
// of its own (an embedded PostgreSQL, so the project's roles do not exist yet and the migrations must
// create them), deploy/postgres/bootstrap.sql run once by the superuser makes bitrix_sync_owner, and
// `npm run db:migrate` as that role builds the whole schema; every function is then owned by it, the
// runtime role logs in, and preflight's owner check passes (a warning while the owner keeps
// CREATEROLE on PostgreSQL 15). The same schema migrated by the superuser fails that check.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { loadConfig } from "../../../src/config/env.js";
import { type EmbeddedServer, startEmbedded } from "../../../src/db/embedded.js";
import { migrateDatabase } from "../../../src/db/migrate.js";
import { withDatabase } from "../../../src/db/url.js";
import { projectRoot } from "../../../src/local/project-root.js";
import { checkDatabase } from "../../../src/preflight/database.js";
import { cleanEnv, runProcess } from "../../helpers/run-process.js";

const hasPsql = spawnSync("psql", ["--version"]).status === 0;
const run = hasPsql ? test.serial : test.skip;
if (!hasPsql)
  console.warn("owner-role.test.ts: SKIPPED, psql is not installed (apt-get install postgresql-client)");

const OWNER_PASSWORD = "owner-pw-7Jq2Lr9Xv4";
const USER_PASSWORD = "user-pw-3Nc8Kd1Wz6";

let dir: string;
let server: EmbeddedServer | undefined;
let superuser: URL;

test.before(async () => {
  if (!hasPsql) return;
  dir = mkdtempSync(join(tmpdir(), "bitrix-sync-owner-"));
  // As root the embedded PostgreSQL runs as the `postgres` system user: it must enter the folder.
  chmodSync(dir, 0o755);
  server = await startEmbedded({ dir: join(dir, "pg"), persistent: false });
  superuser = new URL(server.url);
  const c = new pg.Client({ connectionString: server.url });
  await c.connect();
  try {
    await c.query("create database han");
    await c.query("create database han_superuser");
  } finally {
    await c.end();
  }
  writeFileSync(join(dir, "owner-password"), `${OWNER_PASSWORD}\n`, { mode: 0o600 });
  writeFileSync(join(dir, "user-password"), `${USER_PASSWORD}\n`, { mode: 0o600 });
});

test.after.always(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** psql as the cluster's superuser on `database`; its password through PGPASSWORD, as a DBA would. */
function psql(database: string, args: string[]) {
  const u = new URL(withDatabase(superuser.toString(), database));
  u.password = "";
  return spawnSync("psql", [`--dbname=${u.toString()}`, "--no-psqlrc", ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", PGPASSWORD: decodeURIComponent(superuser.password) },
  });
}

function as(role: string, password: string, database = "han"): string {
  const u = new URL(withDatabase(superuser.toString(), database));
  u.username = role;
  u.password = password;
  return u.toString();
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(sql)).rows;
  } finally {
    await c.end();
  }
}

const bootstrap = join(projectRoot, "deploy", "postgres", "bootstrap.sql");

function preflightConfig(runtimeUrl: string) {
  return loadConfig({
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_DATABASE_URL: runtimeUrl,
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: "https://portal.bitrix24.test/rest/1/owner-role-test/",
    BITRIX_SYNC_PORTAL_HOST: "portal.bitrix24.test",
  });
}

run("bootstrap.sql refuses to run without the owner's password file", (t) => {
  const r = psql("han", ["-f", bootstrap]);
  t.not(r.status, 0);
  t.regex(r.stderr, /pass -v owner_password_file=/);
});

run(
  "bootstrap.sql makes a non-superuser owner and the runtime role's login; running it again changes nothing",
  (t) => {
    const args = [
      "-v",
      `owner_password_file=${join(dir, "owner-password")}`,
      "-v",
      `user_password_file=${join(dir, "user-password")}`,
      "-f",
      bootstrap,
    ];
    const first = psql("han", args);
    t.is(first.status, 0, first.stderr);
    for (const out of [first.stdout, first.stderr]) {
      t.false(out.includes(OWNER_PASSWORD));
      t.false(out.includes(USER_PASSWORD));
    }
    const again = psql("han", args);
    t.is(again.status, 0, again.stderr);
    const roles = psql("han", [
      "-Atc",
      "select rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin from pg_roles where rolname like 'bitrix_sync_%' order by 1",
    ]);
    t.deepEqual(roles.stdout.trim().split("\n"), [
      "bitrix_sync_app_writer|f|f|f|f",
      "bitrix_sync_owner|f|t|f|t",
      "bitrix_sync_user|f|f|f|t",
    ]);
    // The owner owns the App writer's one function through its membership; nobody else holds it.
    const members = psql("han", [
      "-Atc",
      "select m.member::regrole::text from pg_auth_members m where m.roleid = 'bitrix_sync_app_writer'::regrole",
    ]);
    t.is(members.stdout.trim(), "bitrix_sync_owner");
  },
);

run("npm run db:migrate as the owner builds the schema; the owner owns every function", async (t) => {
  const r = await runProcess(
    "npm",
    ["run", "--silent", "db:migrate"],
    cleanEnv({ MIGRATION_DATABASE_URL: as("bitrix_sync_owner", OWNER_PASSWORD) }),
    180_000,
  );
  t.is(r.code, 0, r.stdout + r.stderr);
  t.false((r.stdout + r.stderr).includes(OWNER_PASSWORD));
  const owners = await query<{ owner: string; n: number }>(
    server?.url.replace(/\/postgres$/, "/han") as string,
    `select proowner::regrole::text as owner, count(*)::int as n from pg_proc
      where pronamespace in ('bitrix_sync'::regnamespace, 'han_app'::regnamespace, 'graphile_worker'::regnamespace)
      group by 1 order by 1`,
  );
  // The owner owns every function but the App writer's one (docs/security.md, "The App's tables").
  t.deepEqual(
    owners.map((o) => [o.owner, o.owner === "bitrix_sync_app_writer" ? o.n : "many"]),
    [
      ["bitrix_sync_app_writer", 1],
      ["bitrix_sync_owner", "many"],
    ],
  );
  const schemas = await query<{ nspname: string; owner: string }>(
    as("bitrix_sync_owner", OWNER_PASSWORD),
    "select nspname, nspowner::regrole::text as owner from pg_namespace where nspname in ('bitrix_sync', 'han_app', 'graphile_worker', 'graphile_migrate') order by 1",
  );
  t.deepEqual(
    schemas.map((s) => s.owner),
    ["bitrix_sync_owner", "bitrix_sync_owner", "bitrix_sync_owner", "bitrix_sync_owner"],
  );
  // The migrations made the roles the cluster did not have.
  const made = await query<{ rolname: string }>(
    as("bitrix_sync_owner", OWNER_PASSWORD),
    "select rolname from pg_roles where rolname in ('bitrix_sync_admin', 'han_app_user') order by 1",
  );
  t.deepEqual(
    made.map((m) => m.rolname),
    ["bitrix_sync_admin", "han_app_user"],
  );
  // The runtime role logs in and runs what the service runs.
  const gate = await query<{ done: boolean }>(
    as("bitrix_sync_user", USER_PASSWORD),
    "select bitrix_sync.cutover_performed() as done",
  );
  t.deepEqual(gate, [{ done: false }]);
});

run(
  "preflight: the owner passes (a warning while it keeps CREATEROLE), a superuser owner fails",
  async (t) => {
    const ownerUrl = as("bitrix_sync_owner", OWNER_PASSWORD);
    const config = preflightConfig(as("bitrix_sync_user", USER_PASSWORD));
    const byId = (r: Awaited<ReturnType<typeof checkDatabase>>, id: string) =>
      r.results.find((c) => c.id === id);

    const withCreaterole = await checkDatabase(config, ownerUrl);
    t.is(byId(withCreaterole, "database.reachable")?.status, "ok");
    t.is(
      byId(withCreaterole, "database.grants")?.status,
      "ok",
      byId(withCreaterole, "database.grants")?.detail,
    );
    t.is(byId(withCreaterole, "database.owner")?.status, "warn");
    t.regex(byId(withCreaterole, "database.owner")?.hint ?? "", /NOCREATEROLE/);

    // What the docs say to do after migrating.
    t.is(psql("han", ["-c", "alter role bitrix_sync_owner nocreaterole"]).status, 0);
    const after = await checkDatabase(config, ownerUrl);
    t.is(byId(after, "database.owner")?.status, "ok");
    t.regex(byId(after, "database.owner")?.detail ?? "", /owned by bitrix_sync_owner, not a superuser/);
    // Nothing is due: migrating again needs no CREATEROLE.
    await migrateDatabase(ownerUrl);

    // The same schema migrated by the cluster's superuser.
    await migrateDatabase(withDatabase(superuser.toString(), "han_superuser"));
    const su = await checkDatabase(
      preflightConfig(withDatabase(superuser.toString(), "han_superuser")),
      undefined,
    );
    t.is(byId(su, "database.owner")?.status, "fail");
    t.regex(byId(su, "database.owner")?.detail ?? "", /owned by a superuser \(postgres\)/);
  },
);

run(
  "a migration needing a role the owner may not make stops with BS095 until bootstrap.sql runs again",
  async (t) => {
    // As after migrating: no CREATEROLE (the test above took it), and here the writer's membership
    // is gone too, as on a deployment bootstrapped before the App writer existed.
    t.is(psql("han", ["-c", "revoke bitrix_sync_app_writer from bitrix_sync_owner"]).status, 0);
    const source = readFileSync(
      join(projectRoot, "migrations", "src", "000040-app-side-adversary.sql"),
      "utf8",
    );
    const block = /^do \$\$\n[\s\S]*?\nend \$\$;$/m.exec(source)?.[0];
    if (!block) throw new Error("no role check in migration 000040");
    const owner = new pg.Client({ connectionString: as("bitrix_sync_owner", OWNER_PASSWORD) });
    await owner.connect();
    try {
      const e = await t.throwsAsync(owner.query(block));
      t.is((e as { code?: string }).code, "BS095");
      t.regex((e as { hint?: string }).hint ?? "", /Run deploy\/postgres\/bootstrap\.sql again as the DBA/);
      const again = psql("han", [
        "-v",
        `owner_password_file=${join(dir, "owner-password")}`,
        "-f",
        bootstrap,
      ]);
      t.is(again.status, 0, again.stderr);
      await owner.query(block);
      // And the owner can replace the writer's function again: the include that made it, applied anew.
      await owner.query(readFileSync(join(projectRoot, "sql", "snapshots", "snapshots.sql"), "utf8"));
    } finally {
      await owner.end();
    }
    const ownerOf = psql("han", [
      "-Atc",
      "select proowner::regrole from pg_proc where proname = '_write_app_crm_master'",
    ]);
    t.is(ownerOf.stdout.trim(), "bitrix_sync_app_writer");
  },
);
