// App users created the App's way: identity and profile in one transaction, as the App's role
// han_app_user, so the enqueue trigger records the intent exactly as it does for the real App.
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { DemoError } from "./wait.js";

export interface DemoUser {
  id: string;
  name: string;
  phone: string;
}

/** Inserts an active user_identity and its client_profile in one transaction, as han_app_user. */
export async function createAppUser(pool: pg.Pool, name: string, phone: string): Promise<DemoUser> {
  const id = randomUUID();
  const c = await pool.connect();
  try {
    await c.query("begin");
    try {
      await c.query("set local role han_app_user");
    } catch (e) {
      throw new DemoError(
        `the database user of the demo cannot act as han_app_user (SQLSTATE ${(e as { code?: string }).code ?? "?"}): grant han_app_user to it, or use the embedded database`,
      );
    }
    await c.query(
      "insert into han_app.user_identity (id, phone_number, record_status) values ($1, $2, 'active')",
      [id, phone],
    );
    await c.query(
      "insert into han_app.client_profile (id, user_id, full_name, record_status) values ($1, $2, $3, 'active')",
      [randomUUID(), id, name],
    );
    await c.query("commit");
    return { id, name, phone };
  } catch (e) {
    await c.query("rollback").catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}
