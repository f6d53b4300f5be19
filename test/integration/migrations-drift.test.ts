// The database and the repository cannot drift apart silently (docs/migrations.md): a database
// migrated from migrations/committed/ has exactly the definitions today's sql/ files give, and
// graphile-migrate's own CLI (with the project's .gmrc) builds the same database as the service.
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import test from "ava";
import pg from "pg";
import { migrateDatabase } from "../../src/db/migrate.js";
import { sqlApplyOrder } from "../../src/db/migration-source.js";
import { withDatabase } from "../../src/db/url.js";
import { projectRoot } from "../../src/local/project-root.js";
import { catalogPicture } from "../helpers/catalog.js";
import { createEmptyDb, createTestDb, serverUrl } from "../helpers/testdb.js";

const exec = promisify(execFile);
/**
 * Runs a command; graphile-migrate's CLI once more (up to three tries) when a migration gave up on a
 * lock (55P03) or a deadlock (40P01): the suite migrates other databases of this cluster at the same
 * time, whose grants to the cluster-wide roles take the same locks, and an operator who meets it runs
 * the command again (docs/migrations.md); the service's own migrator does that itself.
 */
async function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await exec(cmd, args, opts);
    } catch (e) {
      const stderr = String((e as { stderr?: unknown }).stderr ?? "");
      if (attempt >= 3 || !/code: '(55P03|40P01)'/.test(stderr)) throw e;
      await new Promise((r) => setTimeout(r, 1000 * attempt));
    }
  }
}

function samePicture(
  t: import("ava").ExecutionContext,
  a: Record<string, unknown[]>,
  b: Record<string, unknown[]>,
) {
  for (const k of Object.keys(a)) t.deepEqual(b[k], a[k], `${k} differ`);
}

test("re-applying today's sql/ files on a database migrated from committed/ changes no definition", async (t) => {
  const db = await createTestDb();
  t.teardown(() => db.drop());
  const migrated = await catalogPicture(db.pool);
  t.true((migrated.functions ?? []).length > 50);
  for (const rel of sqlApplyOrder()) {
    await db.pool.query(readFileSync(join(projectRoot, rel), "utf8"));
  }
  samePicture(t, migrated, await catalogPicture(db.pool));
});

test("graphile-migrate's CLI with .gmrc builds the service's database, and `status` then reports it current", async (t) => {
  const empty = await createEmptyDb();
  t.teardown(() => empty.drop());
  const env = {
    ...process.env,
    DATABASE_URL: empty.url,
    SHADOW_DATABASE_URL: withDatabase(serverUrl(), `${empty.name}_shadow`),
  };
  const cli = join(projectRoot, "node_modules", "graphile-migrate", "dist", "cli.js");
  await run(process.execPath, [cli, "migrate"], { cwd: projectRoot, env });
  const status = await run(process.execPath, [cli, "status"], { cwd: projectRoot, env });
  t.regex(status.stdout, /Up to date/);

  const viaCli = new pg.Client({ connectionString: empty.url });
  await viaCli.connect();
  t.teardown(() => viaCli.end());
  const reference = await createTestDb();
  t.teardown(() => reference.drop());
  samePicture(t, await catalogPicture(reference.pool), await catalogPicture(viaCli));

  // A graphile-worker upgrade adds a table (with row-level security, as graphile-worker does):
  // `migrate --forceActions` gives the runtime role its rights on it although no migration is due.
  await viaCli.query(
    "create table graphile_worker._private_upgrade_probe (id int); alter table graphile_worker._private_upgrade_probe enable row level security",
  );
  await run(process.execPath, [cli, "migrate", "--forceActions"], { cwd: projectRoot, env });
  const { rows } = await viaCli.query<{ can: boolean; policy: boolean; rls: boolean }>(
    `select has_table_privilege('bitrix_sync_user', 'graphile_worker._private_upgrade_probe', 'select, insert, update, delete') as can,
            exists (select 1 from pg_policies where tablename = '_private_upgrade_probe' and 'bitrix_sync_user' = any(roles)) as policy,
            (select relrowsecurity from pg_class where oid = 'graphile_worker._private_upgrade_probe'::regclass) as rls`,
  );
  // Row security off: the runtime's connections run with row_security off (src/db/search-path.ts).
  t.deepEqual(rows[0], { can: true, policy: true, rls: false });
});

test("the service's migrator reapplies the runtime role's rights on graphile-worker's tables on every run", async (t) => {
  const db = await createTestDb();
  t.teardown(() => db.drop());
  await db.pool.query(
    "create table graphile_worker._private_upgrade_probe (id int); alter table graphile_worker._private_upgrade_probe enable row level security",
  );
  await migrateDatabase(db.url);
  const { rows } = await db.pool.query<{ can: boolean; policy: boolean; rls: boolean }>(
    `select has_table_privilege('bitrix_sync_user', 'graphile_worker._private_upgrade_probe', 'select, insert, update, delete') as can,
            exists (select 1 from pg_policies where tablename = '_private_upgrade_probe' and 'bitrix_sync_user' = any(roles)) as policy,
            (select relrowsecurity from pg_class where oid = 'graphile_worker._private_upgrade_probe'::regclass) as rls`,
  );
  t.deepEqual(rows[0], { can: true, policy: true, rls: false });
});

// The newest migration of each release that reached databases: an upgrade from there must end with
// the catalogue of a database built in one go, whatever the migrations after it did.
const RELEASED = [
  "000005-receivers.sql",
  "000012-trace-context.sql",
  "000021-find-by-user-id.sql",
  "000024-step-context.sql",
  "000025-primary-key-fences-and-step-groups.sql",
  "000026-intent-journal.sql",
];

for (const last of RELEASED) {
  test(`a database at the release ending with ${last} upgrades to the catalogue of a fresh one`, async (t) => {
    const committed = join(projectRoot, "migrations", "committed");
    const names = readdirSync(committed)
      .filter((f) => f.endsWith(".sql"))
      .sort();
    t.true(names.includes(last), `${last} is committed`);
    const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-release-"));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, "committed"));
    for (const f of names.slice(0, names.indexOf(last) + 1))
      copyFileSync(join(committed, f), join(dir, "committed", f));

    const empty = await createEmptyDb();
    t.teardown(() => empty.drop());
    await migrateDatabase(empty.url, undefined, dir);
    await migrateDatabase(empty.url);

    const upgraded = new pg.Client({ connectionString: empty.url });
    await upgraded.connect();
    t.teardown(() => upgraded.end());
    const reference = await createTestDb();
    t.teardown(() => reference.drop());
    samePicture(t, await catalogPicture(reference.pool), await catalogPicture(upgraded));
  });
}
