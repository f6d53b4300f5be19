// The alert smart process's settings (§11, §12.3): a version whose terminal stages cannot be told
// apart, or that sends alerts to the smart process without the stages and item fields the mirror
// needs, is refused with its reasons and never half-applied: the active version stays as it was,
// the service keeps running on it, and a database whose active version breaks these rules is not
// migrated (BS094) until it is fixed.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { migrateDatabase } from "../../src/db/migrate.js";
import { projectRoot } from "../../src/local/project-root.js";
import { createSettingsCache } from "../../src/settings-cache.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import { setSettings } from "../helpers/settings.js";
import { rejectsWith } from "../helpers/sql-core.js";
import { createEmptyDb, createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

async function activeVersion(pool: pg.Pool | pg.Client): Promise<{ version: number; values: object }> {
  const { rows } = await pool.query<{ version: number; settings_values: object }>(
    "select version, settings_values from bitrix_sync.settings_versions where status = 'active'",
  );
  return { version: rows[0]?.version ?? -1, values: rows[0]?.settings_values ?? {} };
}

test.serial(
  "a resolved stage equal to the new one is refused with its reason; activating it fails with BS008 and changes nothing",
  async (t) => {
    await setSettings(db, DEFAULT_ALERT_SETTINGS);
    const before = await activeVersion(db.pool);
    const { rows } = await db.pool.query<{ v: number }>(
      `select bitrix_sync.propose_settings('{"alerts.stage_resolved": "DT1040_7:NEW", "batch.size": 30}', 'ops:test') as v`,
    );
    const v = rows[0]?.v as number;
    const { rows: e } = await db.pool.query<{ e: string[] }>(
      "select bitrix_sync.validate_settings_version($1) as e",
      [v],
    );
    t.deepEqual(e[0]?.e, ["alerts.stage_resolved: a terminal stage must differ from alerts.stage_new"]);
    const { rows: stored } = await db.pool.query(
      "select status, validation_errors from bitrix_sync.settings_versions where version = $1",
      [v],
    );
    t.like(stored[0], { status: "rejected" });
    const err = await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.activate_settings_version($1, 'ops:test')", [v]),
      "BS008",
    );
    t.regex(err.message, /only a validated version can be activated/);
    // Nothing of it applies: not the stage, not the batch size that came with it.
    t.deepEqual(await activeVersion(db.pool), before);
    const { rows: s } = await db.pool.query("select bitrix_sync.active_settings() as s");
    t.is(s[0].s["batch.size"], 20);
  },
);

test.serial("a validated version that the alert rules now refuse cannot be activated", async (t) => {
  // Written as the owner, as an older release could have left it: validated, never active.
  const c = await db.pool.connect();
  let v: number;
  try {
    await c.query("begin");
    await c.query("set local session_replication_role = replica");
    const { rows } = await c.query<{ version: number }>(
      `insert into bitrix_sync.settings_versions (settings_values, created_by, status, validated_at)
       values ($1, 'owner', 'validated', now()) returning version`,
      [JSON.stringify({ "alerts.entity_type_id": 1040, "alerts.fields": {} })],
    );
    v = rows[0]?.version as number;
    await c.query("commit");
  } finally {
    c.release();
  }
  const before = await activeVersion(db.pool);
  const err = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.activate_settings_version($1, 'ops:test')", [v]),
    "BS008",
  );
  t.regex(err.message, /no longer validates/);
  t.deepEqual(await activeVersion(db.pool), before);
});

test.serial(
  "the service refuses an alert version forced active and keeps running on the last one that parsed",
  async (t) => {
    await setSettings(db, DEFAULT_ALERT_SETTINGS);
    const cache = await createSettingsCache(db.pool, { intervalMs: 60_000 });
    t.teardown(() => cache.stop());
    const good = cache.version();
    t.is(cache.get().alerts.stageResolved, DEFAULT_ALERT_SETTINGS["alerts.stage_resolved"]);
    // Forced past the validation (session_replication_role = replica, superuser only).
    const c = await db.pool.connect();
    try {
      await c.query("begin");
      await c.query("set local session_replication_role = replica");
      await c.query(
        "update bitrix_sync.settings_versions set status = 'superseded', superseded_at = now() where status = 'active'",
      );
      await c.query(
        `insert into bitrix_sync.settings_versions (settings_values, created_by, status, validated_at, activated_at, activated_by)
         values ($1, 'owner', 'active', now(), now(), 'owner')`,
        [JSON.stringify({ ...DEFAULT_ALERT_SETTINGS, "alerts.stage_resolved": "DT1040_7:NEW" })],
      );
      await c.query("commit");
    } finally {
      c.release();
    }
    await cache.refresh();
    t.like(cache.problem(), { code: "settings_unparsable" });
    t.is(cache.version(), good, "the previous version stays in force");
    t.is(cache.get().alerts.stageResolved, DEFAULT_ALERT_SETTINGS["alerts.stage_resolved"]);
    // Readiness says so too (alert_config_problem reads the same rules in SQL).
    const { rows } = await db.pool.query("select bitrix_sync.alert_config_problem() as p");
    t.is(rows[0].p, "alert_config_invalid");
    await setSettings(db, DEFAULT_ALERT_SETTINGS);
  },
);

test("migration 000030 stops (BS094) on an active version with incomplete alert settings, and runs once it is fixed", async (t) => {
  const committed = join(projectRoot, "migrations", "committed");
  const names = readdirSync(committed)
    .filter((f) => f.endsWith(".sql"))
    .sort();
  const mine = names.findIndex((f) => f.startsWith("000030-"));
  t.true(mine > 0, "000030 is committed");
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-before-000030-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, "committed"));
  for (const f of names.slice(0, mine)) copyFileSync(join(committed, f), join(dir, "committed", f));
  const empty = await createEmptyDb();
  t.teardown(() => empty.drop());
  await migrateDatabase(empty.url, undefined, dir);

  const c = new pg.Client({ connectionString: empty.url });
  await c.connect();
  t.teardown(() => c.end());
  const activate = async (changes: object) => {
    const { rows } = await c.query<{ v: number }>(
      "select bitrix_sync.propose_settings($1, 'ops:test') as v",
      [JSON.stringify(changes)],
    );
    const v = rows[0]?.v;
    const { rows: e } = await c.query<{ e: string[] }>(
      "select bitrix_sync.validate_settings_version($1) as e",
      [v],
    );
    t.deepEqual(e[0]?.e, [], "valid under the rules before 000030");
    await c.query("select bitrix_sync.activate_settings_version($1, 'ops:test')", [v]);
  };
  // What the rules before 000030 allowed: alerts to the smart process with three item fields.
  await activate({
    ...DEFAULT_ALERT_SETTINGS,
    "alerts.fields": { alert_number: "ufCrm14_1001", fingerprint: "ufCrm14_1002", type: "ufCrm14_1004" },
  });
  const before = await activeVersion(c);
  const err = (await t.throwsAsync(migrateDatabase(empty.url))) as {
    code?: string;
    message: string;
    hint?: string;
  };
  t.is(err.code, "BS094", err.message);
  t.regex(err.message, /alerts\.fields: required while alerts\.entity_type_id is set/);
  const { rows: applied } = await c.query<{ n: number }>(
    "select count(*)::int as n from graphile_migrate.migrations where filename = '000030.sql'",
  );
  t.is(applied[0]?.n, 0, "nothing of 000030 was applied");
  t.deepEqual(await activeVersion(c), before);

  await activate(DEFAULT_ALERT_SETTINGS);
  await migrateDatabase(empty.url);
  const { rows: done } = await c.query<{ n: number }>(
    "select count(*)::int as n from graphile_migrate.migrations where filename = '000030.sql'",
  );
  t.is(done[0]?.n, 1);
});
