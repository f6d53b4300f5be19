// Settings in tests. With a database: activate a version through the real validated path. Without
// one: the catalogue's defaults (what active_settings() returns on a fresh database;
// test/integration/settings-schema.test.ts keeps the file equal to it) with a test's changes, parsed
// by the service's own schema.
import { readFileSync } from "node:fs";
import type pg from "pg";
import { parseSettings, type Settings } from "../../src/settings-schema.js";

/** active_settings() of a freshly migrated database, without `_version`. */
export const CATALOGUE_DEFAULTS: Readonly<Record<string, unknown>> = JSON.parse(
  readFileSync(new URL("./catalogue-defaults.json", import.meta.url), "utf8"),
);

/** The typed settings for the defaults with `changes` (catalogue keys, e.g. "batch.size") applied. */
export function testSettings(changes: Record<string, unknown> = {}): Settings {
  const parsed = parseSettings({ ...CATALOGUE_DEFAULTS, ...changes, _version: 1 });
  if (!parsed.ok) throw new Error(`test settings do not parse: ${parsed.errors.join("; ")}`);
  return parsed.settings;
}

/** Activates a settings version with `changes` over the active one (propose, validate, activate). */
export async function setSettings(db: { pool: pg.Pool }, changes: Record<string, unknown>): Promise<number> {
  const { rows } = await db.pool.query<{ v: number }>(
    "select bitrix_sync.propose_settings($1, 'test') as v",
    [JSON.stringify(changes)],
  );
  const v = rows[0]?.v as number;
  const { rows: errs } = await db.pool.query<{ e: string[] }>(
    "select bitrix_sync.validate_settings_version($1) as e",
    [v],
  );
  if ((errs[0]?.e ?? []).length > 0) throw new Error(`invalid test settings: ${JSON.stringify(errs[0]?.e)}`);
  await db.pool.query("select bitrix_sync.activate_settings_version($1, 'test')", [v]);
  return v;
}

/**
 * Runs a test step under other hot settings: a real validated version is activated, and the one
 * active before is restored afterwards (rollback_settings), so the change never outlives the step.
 * Concurrent tests of the same database see it too: call it from serial tests only.
 */
export async function withSettings<T>(
  pool: pg.Pool,
  changes: Record<string, unknown>,
  fn: () => Promise<T>,
): Promise<T> {
  const { rows: before } = await pool.query<{ version: number }>(
    "select version from bitrix_sync.settings_versions where status = 'active'",
  );
  await setSettings({ pool }, changes);
  try {
    return await fn();
  } finally {
    await pool.query("select bitrix_sync.rollback_settings($1, 'test')", [before[0]?.version]);
  }
}

/**
 * Writes one raw JSON value into the active settings version with the guards off
 * (session_replication_role = replica, superuser only): what a version activated before today's
 * bounds and normalisation may hold (e.g. `1036.0` or `3000000000` for an integer key). Returns a
 * function that restores the previous value.
 */
export async function forceActiveSettingValue(
  pool: pg.Pool,
  key: string,
  rawJson: string,
): Promise<() => Promise<void>> {
  const write = async (value: string | null) => {
    const c = await pool.connect();
    try {
      await c.query("begin");
      await c.query("set local session_replication_role = replica");
      const { rows } = await c.query<{ old: string | null }>(
        `with old as (select settings_values -> $1 as v from bitrix_sync.settings_versions where status = 'active')
         update bitrix_sync.settings_versions
            set settings_values = case when $2::text is null then settings_values - $1
                                       else jsonb_set(settings_values, array[$1], $2::jsonb) end
          where status = 'active'
         returning (select v::text from old) as old`,
        [key, value],
      );
      await c.query("commit");
      return rows[0]?.old ?? null;
    } catch (e) {
      await c.query("rollback").catch(() => undefined);
      throw e;
    } finally {
      c.release();
    }
  };
  const old = await write(rawJson);
  return async () => {
    await write(old);
  };
}
