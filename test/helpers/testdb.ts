// Each test file works in its own database, cloned from a template that was migrated once. The
// template's name carries a hash of the migrations, so concurrent runs share it and any change to a
// migration builds a fresh one.
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { migrateDatabase, migrationsFolder } from "../../src/db/migrate.js";
import { withDatabase } from "../../src/db/url.js";

export function serverUrl(): string {
  const url = process.env.TEST_DATABASE_URL;
  if (!url) throw new Error("TEST_DATABASE_URL is not set: run the tests with `npm test`");
  return url;
}

function migrationSources(): string[] {
  const dir = join(migrationsFolder, "committed");
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .map((f) => readFileSync(join(dir, f), "utf8"));
  const current = join(migrationsFolder, "current.sql");
  if (existsSync(current)) files.push(readFileSync(current, "utf8"));
  return files;
}

/** The SQL of migrations/current.sql, applied on top of the committed migrations (work in progress). */
function currentSql(): string {
  const current = join(migrationsFolder, "current.sql");
  return existsSync(current) ? readFileSync(current, "utf8") : "";
}

async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

let templatePromise: Promise<string> | undefined;

/** Name of the migrated template database, building it on first use. */
export function templateDatabase(): Promise<string> {
  templatePromise ??= buildTemplate();
  return templatePromise;
}

async function buildTemplate(): Promise<string> {
  const hash = createHash("sha256").update(migrationSources().join("\0")).digest("hex").slice(0, 12);
  const name = `bs_tpl_${hash}`;
  await withAdmin(async (admin) => {
    // One builder per server; the others wait and then find the template ready.
    await admin.query("select pg_advisory_lock(727001)");
    try {
      const { rows } = await admin.query("select 1 from pg_database where datname = $1 and datistemplate", [
        name,
      ]);
      if (rows.length > 0) return;
      const building = `${name}_building`;
      await admin.query(`drop database if exists ${building} with (force)`);
      await admin.query(`create database ${building}`);
      const url = withDatabase(serverUrl(), building);
      await migrateDatabase(url);
      const sql = currentSql().trim();
      if (sql) {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        try {
          await c.query(sql);
        } finally {
          await c.end();
        }
      }
      await admin.query(`alter database ${building} rename to ${name}`);
      await admin.query(`alter database ${name} with is_template true`);
    } finally {
      await admin.query("select pg_advisory_unlock(727001)");
    }
  });
  return name;
}

export interface TestDb {
  /** Connection string of this file's database (superuser). */
  url: string;
  name: string;
  /** A pool on this file's database. */
  pool: pg.Pool;
  drop(): Promise<void>;
}

export interface TestDbOptions {
  /**
   * Run bitrix_sync.perform_cutover() on the new database (default true). A deployed service always
   * has a cutover: until it runs, the claim functions return nothing (§17). Pass `false` to test
   * that gate or the cutover itself.
   */
  cutover?: boolean;
}

/** A fresh database cloned from the migrated template. Call `drop()` in `test.after.always`. */
export async function createTestDb(opts: TestDbOptions = {}): Promise<TestDb> {
  const template = await templateDatabase();
  const name = `bs_t_${randomBytes(6).toString("hex")}`;
  await withAdmin((c) => c.query(`create database ${name} template ${template}`));
  const url = withDatabase(serverUrl(), name);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  // A dropped connection must not crash the test process.
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  if (opts.cutover ?? true) await pool.query("select * from bitrix_sync.perform_cutover('test')");
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end();
      await withAdmin((c) => c.query(`drop database if exists ${name} with (force)`));
    },
  };
}

export interface OwnedTestDb extends TestDb {
  /** Connection string of the schema owner: a role of this database's own, not a superuser. */
  ownerUrl: string;
  owner: string;
}

/**
 * A database migrated by a dedicated owner role that is not a superuser (LOGIN, CREATEROLE, CREATE on
 * the database: deploy/postgres/bootstrap.sql), as a deployment migrates it; `url` and `pool` stay the
 * superuser's. Slower than createTestDb (the migrations run). The role is dropped with the database.
 */
export async function createOwnedTestDb(opts: TestDbOptions = {}): Promise<OwnedTestDb> {
  const suffix = randomBytes(6).toString("hex");
  const name = `bs_o_${suffix}`;
  const owner = `bs_owner_${suffix}`;
  const password = randomBytes(12).toString("hex");
  await withAdmin(async (c) => {
    await c.query(`create role ${owner} login nosuperuser nocreatedb createrole password '${password}'`);
    await c.query(`create database ${name}`);
    await c.query(`grant create on database ${name} to ${owner}`);
  });
  const url = withDatabase(serverUrl(), name);
  const ownerUrl = new URL(url);
  ownerUrl.username = owner;
  ownerUrl.password = password;
  await migrateDatabase(ownerUrl.toString());
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  if (opts.cutover ?? true) await pool.query("select * from bitrix_sync.perform_cutover('test')");
  return {
    url,
    name,
    pool,
    ownerUrl: ownerUrl.toString(),
    owner,
    async drop() {
      await pool.end();
      await withAdmin(async (c) => {
        await c.query(`drop database if exists ${name} with (force)`);
        await c.query(`drop role if exists ${owner}`);
      });
    },
  };
}

/** An empty database (no migrations), for tests of the migrators themselves. */
export async function createEmptyDb(): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = `bs_e_${randomBytes(6).toString("hex")}`;
  await withAdmin((c) => c.query(`create database ${name}`));
  return {
    url: withDatabase(serverUrl(), name),
    name,
    drop: async () => {
      await withAdmin((c) => c.query(`drop database if exists ${name} with (force)`));
    },
  };
}

/**
 * Runs `fn` in a transaction that is always rolled back, so it leaves nothing behind. For work that
 * must be committed use `inTransaction` (src/db/tx.ts).
 */
export async function inRolledBackTx<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query("begin");
    return await fn(c);
  } finally {
    await c.query("rollback").catch(() => undefined);
    c.release();
  }
}
