// Every connection of the service and of its migrator runs with the search path pg_catalog, pg_temp
// (src/db/search-path.ts, docs/security.md), whatever the database or the URL would give it: the
// service's pools, graphile-worker's utilities, the migrator (`npm run db:migrate`, start-time
// migration) and graphile-migrate's CLI with the project's .gmrc. Each database here is told by
// ALTER DATABASE to use `public` instead, and `public` is made writable by everyone, as on a
// database from before PostgreSQL 15.
import { execFile } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import test from "ava";
import { makeWorkerUtils } from "graphile-worker";
import pg from "pg";
import { migrateDatabase } from "../../src/db/migrate.js";
import { createServicePools } from "../../src/db/pools.js";
import { SEARCH_PATH_SETTING, withSearchPath } from "../../src/db/search-path.js";
import { projectRoot } from "../../src/local/project-root.js";
import { createEmptyDb, createTestDb } from "../helpers/testdb.js";

const run = promisify(execFile);
/** A search_path setting as its list of schemas (`a,b` and `a, b` are the same path). */
const schemas = (path: string | undefined) => (path ?? "").split(",").map((s) => s.trim());
const SERVICE_PATH = schemas(SEARCH_PATH_SETTING);
const require = createRequire(import.meta.url);
const gmHash = require("graphile-migrate/dist/hash") as {
  calculateHash(body: string, previousHash: string | null): string;
};

/** `public` on the path by the database's own setting, and writable by every role. */
async function trapDatabase(url: string, name: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`alter database ${name} set search_path = public`);
    await c.query("grant create on schema public to public");
  } finally {
    await c.end();
  }
}

/** A migrations folder whose one committed migration records the search path it ran with. */
function probeMigrations(): string {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-search-path-"));
  mkdirSync(join(dir, "committed"));
  const body =
    "create schema probe;\ncreate table probe.seen as select pg_catalog.current_setting('search_path') as path;\n";
  const hash = gmHash.calculateHash(body, null);
  writeFileSync(
    join(dir, "committed", "000001-probe.sql"),
    `--! Previous: -\n--! Hash: ${hash}\n--! Message: probe\n\n${body}`,
  );
  return dir;
}

async function seen(url: string): Promise<string | undefined> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<{ path: string }>("select path from probe.seen")).rows[0]?.path;
  } finally {
    await c.end();
  }
}

test("the URL keeps its own options; the service's search path comes last and wins", (t) => {
  const u = new URL(
    withSearchPath(
      "postgres://u:p@db.internal:5432/app?sslmode=verify-full&options=-c%20statement_timeout%3D5s",
    ),
  );
  t.is(
    u.searchParams.get("options"),
    "-c statement_timeout=5s -c search_path=pg_catalog,pg_temp -c row_security=off",
  );
  t.is(u.searchParams.get("sslmode"), "verify-full");
  t.is(u.password, "p");
});

test("every pool of the service and graphile-worker's utilities get pg_catalog, pg_temp", async (t) => {
  const db = await createTestDb();
  t.teardown(() => db.drop());
  await trapDatabase(db.url, db.name);
  // Even with the path asked for in the URL itself.
  const url = new URL(db.url);
  url.searchParams.set("options", "-c search_path=public");
  const pools = createServicePools(url.toString(), { workMax: 2 });
  t.teardown(() => pools.end());
  for (const [use, pool] of Object.entries({
    work: pools.work,
    receiver: pools.receiver,
    status: pools.status,
  })) {
    const { rows } = await pool.query<{ path: string; rls: string }>(
      "select current_setting('search_path') as path, current_setting('row_security') as rls",
    );
    t.deepEqual(schemas(rows[0]?.path), SERVICE_PATH, use);
    // A policy on an App table is refused, never run with the service's rights (docs/security.md).
    t.is(rows[0]?.rls, "off", use);
  }
  // Without the option the database's setting applies: the trap is real.
  const plain = new pg.Client({ connectionString: db.url });
  await plain.connect();
  t.is(
    (await plain.query<{ path: string }>("select current_setting('search_path') as path")).rows[0]?.path,
    "public",
  );
  await plain.end();
  const utils = await makeWorkerUtils({ connectionString: withSearchPath(db.url) });
  t.teardown(() => utils.release());
  const path = await utils.withPgClient((c) =>
    c.query<{ path: string }>("select current_setting('search_path') as path"),
  );
  t.deepEqual(schemas(path.rows[0]?.path), SERVICE_PATH);
});

test("the migrator (npm run db:migrate, start-time migration) runs the migrations with it", async (t) => {
  const empty = await createEmptyDb();
  t.teardown(() => empty.drop());
  await trapDatabase(empty.url, empty.name);
  const folder = probeMigrations();
  t.teardown(() => rmSync(folder, { recursive: true, force: true }));
  await migrateDatabase(empty.url, undefined, folder);
  t.deepEqual(schemas(await seen(empty.url)), SERVICE_PATH);
});

test("graphile-migrate's CLI with the project's .gmrc runs the migrations with it", async (t) => {
  const empty = await createEmptyDb();
  t.teardown(() => empty.drop());
  await trapDatabase(empty.url, empty.name);
  // A project folder holding the real .gmrc, the probe as its migrations, and the files it names.
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-gmrc-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  copyFileSync(join(projectRoot, ".gmrc"), join(dir, ".gmrc"));
  const probe = probeMigrations();
  t.teardown(() => rmSync(probe, { recursive: true, force: true }));
  mkdirSync(join(dir, "migrations", "committed"), { recursive: true });
  for (const f of readdirSync(join(probe, "committed")))
    copyFileSync(join(probe, "committed", f), join(dir, "migrations", "committed", f));
  mkdirSync(join(dir, "sql"));
  copyFileSync(join(projectRoot, "sql", "worker_grants.sql"), join(dir, "sql", "worker_grants.sql"));
  symlinkSync(join(projectRoot, "node_modules"), join(dir, "node_modules"));
  const cli = join(projectRoot, "node_modules", "graphile-migrate", "dist", "cli.js");
  await run(process.execPath, [cli, "migrate"], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "", DATABASE_URL: empty.url },
  });
  t.deepEqual(schemas(await seen(empty.url)), SERVICE_PATH);
  // beforeAllMigrations installed graphile-worker's schema, its URL passed through the environment.
  const c = new pg.Client({ connectionString: empty.url });
  await c.connect();
  t.teardown(() => c.end());
  const { rows } = await c.query("select 1 from pg_namespace where nspname = 'graphile_worker'");
  t.is(rows.length, 1);
});

test(".gmrc never puts the connection string on a command line", (t) => {
  const text = readFileSync(join(projectRoot, ".gmrc"), "utf8").replace(/^\s*\/\/.*$/gm, "");
  const commands = [...text.matchAll(/"command":\s*"((?:[^"\\]|\\.)*)"/g)].map(
    (m) => JSON.parse(`"${m[1]}"`) as string,
  );
  t.true(commands.length > 0);
  for (const command of commands) {
    // Only as the value of an environment assignment before the program, never as an argument.
    const program = command.replace(/^(?:[A-Z_]+=(?:"[^"]*"|'[^']*'|\S+)\s+)*/, "");
    t.notRegex(program, /GM_DBURL|DATABASE_URL|postgres(?:ql)?:\/\//, command);
    t.notRegex(program, /\s(-c|--connection)\b/, command);
  }
});

test("every connection opened in src/ goes through the service's search path", (t) => {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(dir, e.name));
      else if (e.name.endsWith(".ts")) files.push(join(dir, e.name));
    }
  };
  walk(join(projectRoot, "src"));
  let seenConnections = 0;
  for (const f of files) {
    const text = readFileSync(f, "utf8");
    for (const m of text.matchAll(/new pg\.(Client|Pool)\(\{([^}]*)\}/g)) {
      seenConnections++;
      const options = m[2] as string;
      // The migrator's own client reuses the connection string it already extended.
      const ok = /withSearchPath\(/.test(options) || relative(projectRoot, f) === "src/db/migrate.ts";
      t.true(ok, `${relative(projectRoot, f)}: new pg.${m[1]} without withSearchPath`);
    }
  }
  t.true(seenConnections >= 6, String(seenConnections));
});

test("every connection opened by a script the image ships goes through the service's search path", (t) => {
  // The scripts the runtime stage copies (`COPY scripts/... ./scripts/`): what an operator runs
  // against the production database from the image (the migration, the healthcheck, diagnose).
  const dockerfile = readFileSync(join(projectRoot, "Dockerfile"), "utf8");
  const copy = /^COPY ((?:scripts\/\S+ )+)\.\/scripts\/$/m.exec(dockerfile);
  const scripts = copy?.[1]?.trim().split(" ") ?? [];
  t.true(scripts.includes("scripts/diagnose.ts"), scripts.join(" "));
  let seenConnections = 0;
  for (const f of scripts) {
    const text = readFileSync(join(projectRoot, f), "utf8");
    for (const m of text.matchAll(/new pg\.(Client|Pool)\(\{([^}]*)\}/g)) {
      seenConnections++;
      const options = m[2] as string;
      // diagnose pins the string once before it opens its client (`connectionString`).
      const pinned =
        /withSearchPath\(/.test(options) ||
        (/^\s*connectionString\b/.test(options) && /connectionString = withSearchPath\(/.test(text));
      t.true(pinned, `${f}: new pg.${m[1]} without withSearchPath`);
    }
  }
  t.true(seenConnections >= 1, String(seenConnections));
});
