// Applies the project's committed graphile-migrate migrations and graphile-worker's own schema.
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Logger as GraphileLogger } from "@graphile/logger";
import { migrate as gmMigrate } from "graphile-migrate";
import { makeWorkerUtils } from "graphile-worker";
import pg from "pg";
import { projectRoot } from "../local/project-root.js";
import { SEARCH_PATH_SETTING, withSearchPath } from "./search-path.js";

export const migrationsFolder = join(projectRoot, "migrations");

interface Logger {
  info(obj: object, msg?: string): void;
}

const require = createRequire(import.meta.url);
/** Closes graphile-migrate's pools (it exits the process if an idle one sees its database go away). */
export function releaseMigratePools(): void {
  const pgReal = require("graphile-migrate/dist/pgReal") as { clearAllPools?: () => void };
  pgReal.clearAllPools?.();
}

/** Hash of the newest committed migration, read from its `--! Hash:` header. */
function latestMigrationHash(): string | null {
  // The committed files do not change while the process runs; readiness asks on every probe.
  if (latestHash === undefined) latestHash = readLatestHash();
  return latestHash;
}

let latestHash: string | null | undefined;

function readLatestHash(): string | null {
  const dir = join(migrationsFolder, "committed");
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort();
  const last = files.at(-1);
  if (!last) return null;
  const m = /^--! Hash: (\S+)$/m.exec(readFileSync(join(dir, last), "utf8"));
  return m?.[1] ?? null;
}

/**
 * True when the database has applied every committed migration of this release: its newest one is
 * among the applied (each migration names the one before it, so the rest are too). A schema a newer
 * release has migrated further is current for this one: migrations only expand while the release
 * before them runs (docs/migrations.md), and a rolling upgrade keeps this release's replicas in
 * rotation while the next release's migrations are applied (docs/runbook.md, "Rolling upgrade").
 */
export async function migrationsCurrent(client: pg.Pool | pg.PoolClient): Promise<boolean> {
  const want = latestMigrationHash();
  const { rows } = await client.query<{ applied: boolean }>(
    "select exists (select 1 from graphile_migrate.migrations where hash = $1) as applied",
    [want],
  );
  return rows[0]?.applied === true;
}

/** How often a migration that lost a lock conflict with the running service is tried. */
export const MIGRATE_ATTEMPTS = 5;

/** sql/worker_grants.sql: the runtime role's rights on graphile-worker's and graphile-migrate's schemas. */
export const WORKER_GRANTS_FILE = join(projectRoot, "sql", "worker_grants.sql");

/**
 * Brings `connectionString` up to date: graphile-worker's schema first, then the committed
 * migrations, then the runtime role's rights on graphile-worker's tables again (sql/worker_grants.sql:
 * a graphile-worker upgrade may have added tables). The same steps as the graphile-migrate CLI with
 * the project's .gmrc. Safe to run concurrently; graphile-migrate takes a lock.
 */
export async function migrateDatabase(
  url: string,
  log?: Logger,
  /** A folder with a `committed/` of its own (tests: a database at an earlier release). */
  folder: string = migrationsFolder,
): Promise<void> {
  // Every connection of the migrator gets the service's search path (src/db/search-path.ts), as the
  // .gmrc gives graphile-migrate's CLI through pgSettings.
  const connectionString = withSearchPath(url);
  const utils = await makeWorkerUtils({ connectionString });
  try {
    await utils.migrate();
  } finally {
    await utils.release();
  }
  // graphile-migrate's default logger prints to stdout; route its info lines to ours, drop the rest.
  const logger = new GraphileLogger(() => (level, message) => {
    if (level === "info") log?.info({ event: "db.migrate" }, message);
  });
  // Each migration runs in a transaction of its own. On a database the service is using (a rolling
  // upgrade, docs/runbook.md) its locks can meet the service's: a deadlock (40P01) or a lock wait
  // past a migration's lock_timeout (55P03) rolls that migration back whole, with the ones before it
  // kept; it is then run again after a pause, as an operator would.
  // graphile-migrate can leave a second promise of the same failed statement unawaited; while the
  // migrations run, such a rejection of a lock conflict is the one handled below, not a crash.
  const lockConflict = (e: unknown) => {
    const code = (e as { code?: unknown }).code;
    if (code !== "40P01" && code !== "55P03") throw e;
  };
  process.on("unhandledRejection", lockConflict);
  try {
    await migrateWithRetries(connectionString, folder, logger, log);
  } finally {
    process.off("unhandledRejection", lockConflict);
  }
  const c = new pg.Client({ connectionString });
  await c.connect();
  try {
    await c.query(readFileSync(WORKER_GRANTS_FILE, "utf8"));
  } finally {
    await c.end();
  }
}

/**
 * The session settings every migration runs with (here, and in db:build's scratch chain): the
 * service's search path, and jit off: the migrations' catalogue statements (apply_privileges() above
 * all) are planned as expensive, and a server with jit on compiled them for seconds each (3.6 s
 * against 54 ms for apply_privileges(), measured); nothing a migration runs is worth compiling.
 */
export const MIGRATION_SETTINGS = { search_path: SEARCH_PATH_SETTING, jit: "off" };

async function migrateWithRetries(
  connectionString: string,
  folder: string,
  logger: GraphileLogger,
  log?: Logger,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await gmMigrate({
        connectionString,
        migrationsFolder: folder,
        logger,
        pgSettings: MIGRATION_SETTINGS,
      });
      break;
    } catch (e) {
      const code = (e as { code?: unknown }).code;
      if (attempt >= MIGRATE_ATTEMPTS || (code !== "40P01" && code !== "55P03")) throw e;
      log?.info({ event: "db.migrate_retry", code, attempt }, `lock conflict (${code}); trying again`);
      await new Promise((r) => setTimeout(r, 500 * attempt));
    } finally {
      // graphile-migrate keeps its pool open a moment after use and exits the process if that idle
      // pool sees an error (e.g. the database being dropped or renamed). Close it now.
      releaseMigratePools();
    }
  }
}
