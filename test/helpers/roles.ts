// Running statements as one of the project's roles (§13), the way an operator's psql session or the
// service would: `set local role` inside a transaction that commits (asRole) or rolls back
// (asRoleRolledBack). Notices raised to the role are collected.
import type pg from "pg";

export type ProjectRole = "bitrix_sync_admin" | "bitrix_sync_user" | "han_app_user";

async function run<T>(
  pool: pg.Pool,
  role: ProjectRole,
  fn: (c: pg.PoolClient, notices: string[]) => Promise<T>,
  end: "commit" | "rollback",
): Promise<T> {
  const c = await pool.connect();
  const notices: string[] = [];
  const onNotice = (n: { message?: string }) => notices.push(n.message ?? "");
  c.on("notice", onNotice);
  try {
    await c.query("begin");
    await c.query(`set local role ${role}`);
    const out = await fn(c, notices);
    await c.query(end);
    return out;
  } catch (e) {
    await c.query("rollback").catch(() => undefined);
    throw e;
  } finally {
    c.off("notice", onNotice);
    c.release();
  }
}

/** Runs `fn` as `role` in a transaction that commits. */
export function asRole<T>(
  pool: pg.Pool,
  role: ProjectRole,
  fn: (c: pg.PoolClient, notices: string[]) => Promise<T>,
): Promise<T> {
  return run(pool, role, fn, "commit");
}

/** Runs `fn` as `role` in a transaction that is rolled back. */
export function asRoleRolledBack<T>(
  pool: pg.Pool,
  role: ProjectRole,
  fn: (c: pg.PoolClient, notices: string[]) => Promise<T>,
): Promise<T> {
  return run(pool, role, fn, "rollback");
}
