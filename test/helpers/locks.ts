// Stopping the service at a chosen point: a lock held in a transaction of its own until released
// (rolled back). Shared by the crash tests (e2e-crash, e2e-rebind-crash).
import type pg from "pg";

/** A lock held until `release()`, which rolls its transaction back. */
export type Held = { release(): Promise<void> };

/** Runs `sql` (e.g. `select ... for update`) in a new transaction on `pool` and keeps it open. */
export async function hold(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<Held> {
  const c = await pool.connect();
  try {
    await c.query("begin");
    await c.query(sql, params);
  } catch (e) {
    await c.query("rollback").catch(() => undefined);
    c.release();
    throw e;
  }
  return {
    async release() {
      await c.query("rollback").catch(() => undefined);
      c.release();
    },
  };
}
