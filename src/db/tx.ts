import type pg from "pg";

/**
 * Runs `fn` in BEGIN/COMMIT on one pooled client: commits when it returns, rolls back and rethrows
 * when it throws. A client whose rollback fails too (its connection is gone: a database restart, a
 * terminated backend) is destroyed instead of going back to the pool.
 */
export async function inTransaction<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  let broken = false;
  try {
    await c.query("begin");
    const out = await fn(c);
    await c.query("commit");
    return out;
  } catch (e) {
    broken = !(await c.query("rollback").then(
      () => true,
      () => false,
    ));
    throw e;
  } finally {
    c.release(broken || undefined);
  }
}
