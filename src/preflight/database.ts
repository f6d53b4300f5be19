// Preflight, database: reachable, over verified TLS unless on loopback, a search path nobody untrusted
// can plant objects on, migrated, graphile-worker's schema, a schema owner that is not a superuser,
// the roles' privileges as the catalogue defines them (bitrix_sync.role_privilege_drift), the hot
// settings valid, and the cutover state (§13, §17). Read-only: nothing but SELECTs.
import { readdirSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { appTableHooks, describeHook, unknownHooks } from "../app-tables.js";
import type { Config } from "../config/env.js";
import { isLoopbackHost } from "../crm/client.js";
import { sqlstate } from "../db/errors.js";
import { migrationsFolder } from "../db/migrate.js";
import { outsideWindow, readSchemaState, windowText } from "../db/schema-window.js";
import { withSearchPath } from "../db/search-path.js";
import { databaseAddress } from "../db/url.js";
import { parseSettings, type Settings } from "../settings-schema.js";
import { type CheckResult, check, notChecked } from "./types.js";

export interface DatabaseChecks {
  results: CheckResult[];
  /** The active hot settings, when they could be read and parsed (the portal checks use them). */
  settings: Settings | null;
}

const IDS = [
  "database.reachable",
  "database.tls",
  "database.search_path",
  "database.migrations",
  "database.worker_schema",
  "database.owner",
  "database.grants",
  "database.app_tables",
  "database.settings",
  "database.cutover",
] as const;

/**
 * `plain`: without the service's search path, i.e. with the path the database and the role give a
 * session (psql, the graphile-worker CLI), for the search path check.
 */
async function connect(url: string, timeoutMs: number, plain = false): Promise<pg.Client> {
  const c = new pg.Client({
    // As the service connects (src/db/search-path.ts): the search path checked is the one it gets.
    connectionString: plain ? url : withSearchPath(url),
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
    application_name: "bitrix-sync-preflight",
  });
  // An error after connecting (the server going away) must not crash the process.
  c.on("error", () => undefined);
  await c.connect();
  // Preflight's checks read the catalogue (the privilege drift view joins all of it); a server with
  // jit on compiled that view for seconds (2.6 s against 30 ms, measured), and under load a check
  // ran past its timeout and took the checks after it on the same session with it.
  await c.query("set jit = off");
  return c;
}

/**
 * `ownerUrl`: a connection of the schema owner (MIGRATION_DATABASE_URL), which may read the
 * privilege drift; the service's own role may not (sql/privileges.sql).
 */
export async function checkDatabase(config: Config, ownerUrl: string | undefined): Promise<DatabaseChecks> {
  const url = config.secrets.BITRIX_SYNC_DATABASE_URL;
  if (url === undefined) {
    return {
      settings: null,
      results: IDS.map((id) =>
        notChecked(
          id,
          "BITRIX_SYNC_DATABASE_URL is not configured (the sandbox's embedded database is not a deployment)",
          "provide the BITRIX_SYNC_DATABASE_URL secret",
        ),
      ),
    };
  }
  const timeoutMs = config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC * 1000;
  const where = databaseAddress(url);
  const tls = checkTls(url, ownerUrl);
  let c: pg.Client;
  try {
    c = await connect(url, timeoutMs);
  } catch (e) {
    const code = sqlstate(e) ?? (e as NodeJS.ErrnoException).code ?? "no answer";
    return {
      settings: null,
      results: [
        check(
          "database.reachable",
          "unknown",
          `could not connect to ${where} (${code})`,
          "check that PostgreSQL runs and that BITRIX_SYNC_DATABASE_URL's host, port, user and password are right",
        ),
        tls,
        ...IDS.slice(2).map((id) => notChecked(id, `the database at ${where} is not reachable`)),
      ],
    };
  }
  const results: CheckResult[] = [];
  let settings: Settings | null = null;
  try {
    const who = await c.query<{ role: string; superuser: boolean }>(
      "select current_user as role, r.rolsuper as superuser from pg_roles r where r.rolname = current_user",
    );
    const role = who.rows[0];
    results.push(
      role?.role === "bitrix_sync_user"
        ? check("database.reachable", "ok", `${where} answers; the service connects as bitrix_sync_user`)
        : check(
            "database.reachable",
            "warn",
            `${where} answers, but the service connects as ${role?.superuser ? "a superuser" : `role ${role?.role ?? "?"}`}, not bitrix_sync_user`,
            "give the service a connection as bitrix_sync_user (§13); the owner is for migrations only",
          ),
    );
    results.push(tls);
    results.push(await checkSearchPath(c, url, timeoutMs));

    // Migrations: graphile-migrate's table against migrations/committed.
    const committed = readdirSync(join(migrationsFolder, "committed")).filter((f) =>
      f.endsWith(".sql"),
    ).length;
    const hasTable = await c.query("select to_regclass('graphile_migrate.migrations') is not null as t");
    let migrated = false;
    if (!hasTable.rows[0]?.t) {
      results.push(
        check(
          "database.migrations",
          "fail",
          `not migrated: graphile_migrate.migrations does not exist (0 of ${committed} migrations applied)`,
          "run `npm run db:migrate` with the owner's MIGRATION_DATABASE_URL (docs/deployment.md)",
        ),
      );
    } else {
      const applied = Number(
        (await c.query<{ n: string }>("select count(*) as n from graphile_migrate.migrations")).rows[0]?.n ??
          0,
      );
      // The compatibility window (src/db/schema-window.ts): this release's migrations applied, and no
      // contract step past its schema. The same verdict as the start (exit 76) and readiness.
      const schema = await readSchemaState(c);
      const outside = outsideWindow(schema, where);
      migrated = outside === null;
      const floor = schema.floor === null ? "no contract step" : `contract floor ${schema.floor}`;
      results.push(
        migrated
          ? check(
              "database.migrations",
              "ok",
              `current: schema ${schema.database} (${applied} migrations applied, ${committed} committed here; ${floor}), inside this release's window: ${windowText()}`,
            )
          : check(
              "database.migrations",
              "fail",
              `${schema.ownApplied ? "contracted" : "behind"}: ${outside}`,
              schema.ownApplied
                ? 'deploy a release whose schema is at or above the contract floor, or restore (docs/runbook.md, "Rolling back")'
                : "run `npm run db:migrate` with the owner's MIGRATION_DATABASE_URL",
            ),
      );
    }

    const worker = await c.query(
      "select exists (select 1 from pg_namespace where nspname = 'graphile_worker') as w",
    );
    results.push(
      worker.rows[0]?.w
        ? check("database.worker_schema", "ok", "graphile_worker's schema is present")
        : check(
            "database.worker_schema",
            "fail",
            "graphile_worker's schema is missing",
            "run `npm run db:migrate` as the owner: it installs graphile-worker's schema first",
          ),
    );

    if (!migrated) {
      const why = "the schema is not current (database.migrations)";
      results.push(notChecked("database.owner", why));
      results.push(notChecked("database.grants", why), notChecked("database.app_tables", why));
      results.push(notChecked("database.settings", why));
      results.push(notChecked("database.cutover", why));
      return { results, settings };
    }

    results.push(await checkOwner(c));
    results.push(await checkGrants(c, ownerUrl, timeoutMs));
    results.push(await checkAppTables(c, config.env.BITRIX_SYNC_APP_TABLE_HOOKS));

    const active = await c.query<{ s: unknown }>("select bitrix_sync.active_settings() as s");
    const parsed = parseSettings(active.rows[0]?.s);
    if (parsed.ok) {
      settings = parsed.settings;
      results.push(
        check(
          "database.settings",
          "ok",
          `active settings version ${parsed.version ?? "(defaults)"} is valid`,
        ),
      );
    } else {
      results.push(
        check(
          "database.settings",
          "fail",
          `active settings invalid: ${parsed.errors.join("; ")}`,
          "propose, validate and activate a corrected version (docs/admin.md)",
        ),
      );
    }

    const cut = await c.query<{ done: boolean }>("select bitrix_sync.cutover_performed() as done");
    if (cut.rows[0]?.done) {
      results.push(check("database.cutover", "ok", "the cutover has been performed"));
    } else {
      // Before enabling this is the expected state (§17: cut over, then enable); once enabled it
      // means no work is ever claimed.
      const enabled = config.env.BITRIX_SYNC_ENABLED === true;
      results.push(
        check(
          "database.cutover",
          enabled ? "fail" : "warn",
          enabled
            ? "BITRIX_SYNC_ENABLED=true but the cutover has not been performed: nothing will be processed"
            : "the cutover has not been performed yet",
          "after the stub is stopped, as bitrix_sync_admin: select * from bitrix_sync.perform_cutover('ops:<you>'); then enable (docs/operations.md)",
        ),
      );
    }
  } catch (e) {
    const code = sqlstate(e) ?? (e as NodeJS.ErrnoException).code ?? "error";
    const done = new Set(results.map((r) => r.id));
    for (const id of IDS) {
      if (!done.has(id)) results.push(notChecked(id, `the database answered an error (${code})`));
    }
  } finally {
    await c.end().catch(() => undefined);
  }
  return { results, settings };
}

/** A row of bitrix_sync.role_privilege_drift. */
export interface Drift {
  object_type: string;
  object_name: string;
  role: string | null;
  privilege: string | null;
  column_name: string | null;
  problem: string;
}

/** The drift view, read as the owner when given (the service's role may not read it). */
async function checkGrants(
  service: pg.Client,
  ownerUrl: string | undefined,
  timeoutMs: number,
): Promise<CheckResult> {
  let c = service;
  let owner: pg.Client | null = null;
  try {
    if (ownerUrl !== undefined) {
      try {
        owner = await connect(ownerUrl, timeoutMs);
        c = owner;
      } catch (e) {
        return check(
          "database.grants",
          "unknown",
          `could not connect with MIGRATION_DATABASE_URL (${sqlstate(e) ?? (e as NodeJS.ErrnoException).code ?? "no answer"})`,
          "check the owner's connection string",
        );
      }
    }
    let rows: Drift[];
    try {
      rows = (
        await c.query<Drift>(
          "select object_type, object_name, role, privilege, column_name, problem from bitrix_sync.role_privilege_drift order by 2, 3, 4, 5",
        )
      ).rows;
    } catch (e) {
      if (sqlstate(e) === "42501") {
        return check(
          "database.grants",
          "unknown",
          "the service's role may not read bitrix_sync.role_privilege_drift",
          "run preflight with the owner's connection in MIGRATION_DATABASE_URL (or MIGRATION_DATABASE_URL_FILE)",
        );
      }
      throw e;
    }
    return grantsVerdict(rows);
  } finally {
    await owner?.end().catch(() => undefined);
  }
}

/** Loopback (127.0.0.0/8, ::1, localhost) or a Unix socket: the connection never crosses a network. */
function local(url: string): boolean {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  const host = decodeURIComponent(u.hostname) || u.searchParams.get("host") || "localhost";
  return host.startsWith("/") || isLoopbackHost(host.replace(/^\[|\]$/g, ""));
}

function sslmode(url: string): string | null {
  try {
    return new URL(url).searchParams.get("sslmode");
  } catch {
    return null;
  }
}

/**
 * A connection that crosses a network must be encrypted and must know whom it talks to: `sslmode=
 * verify-full` (the server's certificate checked against a trusted root and the host name).
 * Anything less lets whoever sits on the path read the intents and the personal data, or pose as
 * the database. The URLs' text is never shown, only the variable and the mode found.
 */
function checkTls(serviceUrl: string, ownerUrl: string | undefined): CheckResult {
  const urls: Array<[string, string]> = [["BITRIX_SYNC_DATABASE_URL", serviceUrl]];
  if (ownerUrl !== undefined) urls.push(["MIGRATION_DATABASE_URL", ownerUrl]);
  const weak: string[] = [];
  const onLoopback: string[] = [];
  for (const [name, url] of urls) {
    if (local(url)) onLoopback.push(name);
    else if (sslmode(url) !== "verify-full") weak.push(`${name} (sslmode=${sslmode(url) ?? "unset"})`);
  }
  if (weak.length > 0) {
    return check(
      "database.tls",
      "fail",
      `not on loopback and not sslmode=verify-full: ${weak.join(", ")}`,
      "add sslmode=verify-full to the URL (and sslrootcert=<the CA's certificate> unless the system's roots sign the server's), so the connection is encrypted and the server's certificate and host name are checked",
    );
  }
  const remote = urls.filter(([name]) => !onLoopback.includes(name)).map(([name]) => name);
  return check(
    "database.tls",
    "ok",
    [
      remote.length > 0 ? `${remote.join(", ")}: sslmode=verify-full` : "",
      onLoopback.length > 0 ? `${onLoopback.join(", ")}: on loopback` : "",
    ]
      .filter((x) => x !== "")
      .join("; "),
  );
}

/** For each schema of `path`, the roles other than superusers and its owner's members that may CREATE in it. */
async function untrustedCreators(c: pg.Client, path: string[]): Promise<string[]> {
  const { rows } = await c.query<{ schema: string; roles: string[] }>(
    `select n.nspname as schema, array_agg(r.rolname::text order by r.rolname) as roles
       from pg_catalog.pg_namespace n
       cross join pg_catalog.pg_roles r
      where n.nspname = any($1::text[])
        and not r.rolsuper
        and not pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')
        and pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE')
      group by n.nspname
      order by n.nspname`,
    [path],
  );
  return rows.map(
    (r) => `${r.schema} (${r.roles.slice(0, 5).join(", ")}${r.roles.length > 5 ? ", ..." : ""})`,
  );
}

/**
 * The search path of the service's and the migrator's connections (src/db/search-path.ts): a schema
 * on it where a role other than its owner or a superuser may CREATE lets that role plant an object
 * the service resolves by name: a failure. The path a session gets without the service's option
 * (psql, the graphile-worker CLI) is looked at too: there the same is a warning.
 */
async function checkSearchPath(c: pg.Client, url: string, timeoutMs: number): Promise<CheckResult> {
  const path = async (client: pg.Client) =>
    (await client.query<{ path: string[] }>("select pg_catalog.current_schemas(false)::text[] as path"))
      .rows[0]?.path ?? [];
  const servicePath = await path(c);
  const unsafe = await untrustedCreators(c, servicePath);
  if (unsafe.length > 0) {
    return check(
      "database.search_path",
      "fail",
      `the service's search path (${servicePath.join(", ")}) has schemas other roles may create in: ${unsafe.join("; ")}`,
      "revoke CREATE on those schemas from every role but their owner (REVOKE CREATE ON SCHEMA <schema> FROM PUBLIC, <role>); docs/security.md",
    );
  }
  let plain: pg.Client | null = null;
  try {
    plain = await connect(url, timeoutMs, true);
    const defaultPath = await path(plain);
    const open = await untrustedCreators(plain, defaultPath);
    if (open.length > 0) {
      return check(
        "database.search_path",
        "warn",
        `the service's search path (${servicePath.join(", ")}) is safe, but a session's default path (${defaultPath.join(", ")}: psql, the graphile-worker CLI) has schemas other roles may create in: ${open.join("; ")}`,
        "revoke CREATE on those schemas from PUBLIC and every role but their owner, or set the role's search_path (ALTER ROLE ... SET search_path = pg_catalog, pg_temp); docs/security.md",
      );
    }
    return check(
      "database.search_path",
      "ok",
      `the service's search path is ${servicePath.join(", ")}; no role but the owners and superusers may create in a schema on it or on a session's default path`,
    );
  } finally {
    await plain?.end().catch(() => undefined);
  }
}

/**
 * What runs on the App's tables besides the project's own (src/app-tables.ts): every entry
 * BITRIX_SYNC_APP_TABLE_HOOKS does not name fails. None of it runs with the service's rights (the
 * service's write runs as the App writer, its reads with row_security off); but a row-security
 * policy makes every statement of the service on that table fail, a table replaced by a view runs
 * the view's functions for every reader, and anything the App did not announce deserves a look.
 */
async function checkAppTables(c: pg.Client, allowed: readonly string[]): Promise<CheckResult> {
  const rows = await appTableHooks(c);
  const unknown = unknownHooks(rows, allowed);
  if (unknown.length === 0) {
    return check(
      "database.app_tables",
      "ok",
      rows.length === 0
        ? "nothing but the project's own trigger runs on han_app's identity and profile tables"
        : `what runs on han_app's identity and profile tables is known: ${rows.length} entr${rows.length === 1 ? "y" : "ies"} of BITRIX_SYNC_APP_TABLE_HOOKS`,
    );
  }
  const allowable = unknown.every((h) =>
    ["trigger", "rule", "default", "generated", "check", "index", "column_type"].includes(h.kind),
  );
  return check(
    "database.app_tables",
    "fail",
    `${unknown.length} thing(s) on the App's tables that BITRIX_SYNC_APP_TABLE_HOOKS does not name: ${unknown
      .slice(0, 8)
      .map(describeHook)
      .join("; ")}${unknown.length > 8 ? "; ..." : ""}`,
    `${
      allowable
        ? "if they are the App's own (an updated_at or audit trigger, say), add each as kind:table:name to BITRIX_SYNC_APP_TABLE_HOOKS (e.g. " +
          unknown
            .slice(0, 2)
            .map((h) => `${h.kind}:${h.relation}:${h.name}`)
            .join(",") +
          "); otherwise ask the App's owner to remove them"
        : "row security, a policy, a missing table, a view or a child table in the place of the App's table, or a project table of han_app owned by another role cannot be allowed: every statement of the service there fails or means something else; ask the App's owner to undo it"
    }; docs/security.md, "The App's tables"`,
  );
}

/**
 * Who owns the project's functions and schemas: the security definer functions run with their
 * owner's rights, so a superuser owner turns any flaw in one of them into the whole cluster. On
 * PostgreSQL 15 and older CREATEROLE is nearly as much (such a role may grant itself
 * pg_execute_server_program): a warning. So is the owner's membership in the role that owns the
 * App's tables: the App's code would then run with the rights of the project's owner wherever the
 * owner reads a table of the App's as its own (docs/security.md, "The App's tables"). The one
 * function bitrix_sync_app_writer owns (_write_app_crm_master) is its on purpose.
 */
async function checkOwner(c: pg.Client): Promise<CheckResult> {
  const { rows } = await c.query<{ owner: string; superuser: boolean; createrole: boolean; definer: number }>(
    `select r.rolname::text as owner, r.rolsuper as superuser, r.rolcreaterole as createrole,
            count(*) filter (where o.definer)::int as definer
       from (select p.proowner as oid, p.prosecdef as definer
               from pg_catalog.pg_proc p
              where p.pronamespace in ('bitrix_sync'::regnamespace, 'han_app'::regnamespace)
                and p.proowner <> coalesce(to_regrole('bitrix_sync_app_writer')::oid, 0::oid)
             union all
             select n.nspowner, false
               from pg_catalog.pg_namespace n
              where n.nspname in ('bitrix_sync', 'han_app')) o
       join pg_catalog.pg_roles r on r.oid = o.oid
      group by r.rolname, r.rolsuper, r.rolcreaterole
      order by r.rolname`,
  );
  const owners = rows.map((r) => r.owner).join(", ");
  const superusers = rows.filter((r) => r.superuser);
  if (superusers.length > 0) {
    const definer = superusers.reduce((n, r) => n + r.definer, 0);
    return check(
      "database.owner",
      "fail",
      `the project's schemas and functions are owned by a superuser (${superusers.map((r) => r.owner).join(", ")}), ${definer} of them security definer: each runs with every right of the cluster`,
      "migrate as a dedicated non-superuser owner (deploy/postgres/bootstrap.sql; docs/deployment.md), or ALTER the owner NOSUPERUSER",
    );
  }
  const version = Number(
    (await c.query<{ v: string }>("select pg_catalog.current_setting('server_version_num') as v")).rows[0]
      ?.v ?? 0,
  );
  const createrole = rows.filter((r) => r.createrole);
  const { rows: app } = await c.query<{ app_owner: string | null; member: boolean }>(
    `select o.relowner::regrole::text as app_owner,
            o.relowner <> n.nspowner and pg_catalog.pg_has_role(n.nspowner, o.relowner, 'MEMBER') as member
       from pg_catalog.pg_class o, pg_catalog.pg_namespace n
      where o.oid = to_regclass('han_app.client_profile') and n.nspname = 'bitrix_sync'`,
  );
  const member = app[0]?.member ? app[0].app_owner : null;
  const warnings: string[] = [];
  const hints: string[] = [];
  if (createrole.length > 0 && version < 160000) {
    warnings.push(
      `the owner ${createrole.map((r) => r.owner).join(", ")} is not a superuser but has CREATEROLE, which on PostgreSQL ${Math.floor(version / 10000)} lets it grant itself any non-superuser role (pg_execute_server_program among them)`,
    );
    hints.push(
      `after migrating, as the DBA: ${createrole.map((r) => `ALTER ROLE ${r.owner} NOCREATEROLE;`).join(" ")} the migrations need it no more (a new role comes from deploy/postgres/bootstrap.sql, docs/deployment.md)`,
    );
  }
  if (member) {
    warnings.push(
      `the schema owner is a member of ${member}, the role that owns the App's tables: the App's owner and the project's share one set of rights`,
    );
    hints.push(
      `run deploy/postgres/bootstrap.sql again as the DBA with -v app_owner=${member} (without app_owner_membership): it grants the schema owner what the migrations need on the App's tables and revokes the membership (docs/deployment.md, "The database roles")`,
    );
  }
  if (warnings.length > 0) return check("database.owner", "warn", warnings.join("; "), hints.join("; "));
  return check("database.owner", "ok", `owned by ${owners}, not a superuser`);
}

const PROJECT_ROLES = new Set(["bitrix_sync_user", "bitrix_sync_admin", "han_app_user"]);

/** One drift row in words: a privilege (or its absence) on an object, or a role membership. */
export function describeDrift(r: Drift): string {
  if (r.object_type === "role") {
    const admin = r.privilege?.includes("ADMIN OPTION") ? " with admin option" : "";
    return r.problem === "conflicting_membership"
      ? `conflicting_membership ${r.role} holds ${r.object_name} and another project role`
      : `extra_membership ${r.role} is a member of ${r.object_name}${admin}`;
  }
  return `${r.problem} ${r.privilege ?? ""}${r.column_name ? ` (${r.column_name})` : ""} on ${r.object_type} ${r.object_name}${r.role ? ` for ${r.role}` : ""}`.replace(
    /\s+/g,
    " ",
  );
}

/**
 * The database.grants check from the drift rows. The hint fits what was found: re-applying the
 * catalogue (sql/grants.sql) repairs the three roles' grants only; a role outside the catalogue and
 * a membership need a REVOKE by hand.
 */
export function grantsVerdict(rows: readonly Drift[]): CheckResult {
  if (rows.length === 0)
    return check("database.grants", "ok", "roles, memberships and grants match sql/privileges.sql");
  const shown = rows.slice(0, 5).map(describeDrift);
  const hints: string[] = [];
  if (
    rows.some(
      (r) =>
        r.object_type !== "role" && (r.role === null || PROJECT_ROLES.has(r.role) || r.role === "PUBLIC"),
    )
  )
    hints.push("re-apply the catalogue as the owner (psql -f sql/grants.sql) or revoke the manual GRANT");
  if (
    rows.some(
      (r) => r.object_type !== "role" && r.role !== null && !PROJECT_ROLES.has(r.role) && r.role !== "PUBLIC",
    )
  )
    hints.push("revoke the privilege from the role outside the catalogue (REVOKE ... FROM <role>)");
  if (rows.some((r) => r.object_type === "role"))
    hints.push(
      "revoke the membership (REVOKE <role> FROM <member>): a login holds one project role, without admin option",
    );
  return check(
    "database.grants",
    "fail",
    `${rows.length} difference(s) from the privilege catalogue: ${shown.join("; ")}${rows.length > 5 ? "; ..." : ""}`,
    `${hints.join("; ")}; see docs/security.md`,
  );
}
