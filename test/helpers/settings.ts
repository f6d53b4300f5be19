// Runs a test step under other hot settings: a real validated version is activated, and the one
// active before is restored afterwards (rollback_settings), so the change never outlives the step.
// Concurrent tests of the same database see it too: call it from serial tests only.
import type pg from "pg";

export async function withSettings<T>(
  pool: pg.Pool,
  changes: Record<string, unknown>,
  fn: () => Promise<T>,
): Promise<T> {
  const { rows: before } = await pool.query<{ version: number }>(
    "select version from bitrix_sync.settings_versions where status = 'active'",
  );
  const { rows } = await pool.query<{ v: number }>("select bitrix_sync.propose_settings($1, 'test') as v", [
    JSON.stringify(changes),
  ]);
  const { rows: errors } = await pool.query<{ e: string[] }>(
    "select bitrix_sync.validate_settings_version($1) as e",
    [rows[0]?.v],
  );
  if ((errors[0]?.e ?? []).length > 0)
    throw new Error(`invalid test settings: ${JSON.stringify(errors[0]?.e)}`);
  await pool.query("select bitrix_sync.activate_settings_version($1, 'test')", [rows[0]?.v]);
  try {
    return await fn();
  } finally {
    await pool.query("select bitrix_sync.rollback_settings($1, 'test')", [before[0]?.version]);
  }
}
