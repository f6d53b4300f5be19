// Small helpers for the integration tests of the SQL core (workflows, commands, webhooks, alerts):
// the one PostgreSQL error assertion, explicit transactions on one client, putting a row into a
// given state without walking every edge, and a log of the state changes a table went through.
import type { ExecutionContext } from "ava";
import type pg from "pg";
import { inTransaction } from "../../src/db/tx.js";

export type Queryable = pg.Pool | pg.PoolClient | pg.Client;

/** The fields of a PostgreSQL error the tests look at. */
export interface PgError {
  code: string;
  message: string;
  hint?: string;
  detail?: string;
  constraint?: string;
}

/**
 * The one assertion for a PostgreSQL error: `p` rejects with SQLSTATE `code`. Returns the error, so
 * the test can look at its message, HINT or constraint. `note` names the case in a loop.
 */
export async function rejectsWith(
  t: ExecutionContext,
  p: Promise<unknown>,
  code: string,
  note?: string,
): Promise<PgError> {
  const err = (await t.throwsAsync(p)) as unknown as PgError | undefined;
  t.is(err?.code, code, note ? `${note}: ${err?.message}` : err?.message);
  return err ?? { code: "", message: "" };
}

/** The first row of a query; fails when there is none. */
export async function one<T extends pg.QueryResultRow>(
  db: Queryable,
  sql: string,
  params: unknown[] = [],
): Promise<T> {
  const { rows } = await db.query<T>(sql, params);
  const row = rows[0];
  if (row === undefined) throw new Error(`no row from: ${sql}`);
  return row;
}

/** A client checked out of the pool for explicit BEGIN / COMMIT steps; release it with `done()`. */
export interface Session {
  c: pg.PoolClient;
  done(): void;
}

export async function session(pool: pg.Pool): Promise<Session> {
  const c = await pool.connect();
  let released = false;
  return {
    c,
    done() {
      if (released) return;
      released = true;
      c.release();
    },
  };
}

/**
 * Sets columns of one row with the guard and stamp triggers off (session_replication_role =
 * replica, superuser only). Tests use it to start from a state without walking every edge to it;
 * the CHECK constraints still apply.
 */
export async function forceRow(
  pool: pg.Pool,
  table: string,
  id: string,
  values: Record<string, unknown>,
): Promise<void> {
  const cols = Object.keys(values);
  const set = cols.map((col, i) => `${col} = $${i + 2}`).join(", ");
  await inTransaction(pool, async (c) => {
    await c.query("set local session_replication_role = replica");
    const { rowCount } = await c.query(`update ${table} set ${set} where id = $1`, [
      id,
      ...Object.values(values),
    ]);
    if (rowCount !== 1) throw new Error(`forceRow: no row ${id} in ${table}`);
  });
}

/**
 * Inserts one row with the triggers off (session_replication_role = replica, superuser only), so a
 * test can start from a row born in a later state, which the initial-state guards
 * (sql/row_guards.sql) refuse otherwise. The CHECK constraints still apply. Returns the row.
 */
export async function forceInsert(
  pool: pg.Pool,
  table: string,
  values: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const cols = Object.keys(values);
  return await inTransaction(pool, async (c) => {
    await c.query("set local session_replication_role = replica");
    const { rows } = await c.query(
      `insert into ${table} (${cols.join(", ")}) values (${cols.map((_, i) => `$${i + 1}`).join(", ")}) returning *`,
      Object.values(values),
    );
    return rows[0] as Record<string, unknown>;
  });
}

/**
 * Installs an AFTER UPDATE trigger that logs every change of `column` on `table` into
 * public.test_transitions, so a test can assert the exact path a row took inside one function call.
 */
export async function logTransitions(db: Queryable, table: string, column: string): Promise<void> {
  await db.query(`
    create table if not exists public.test_transitions (
      seq bigint generated always as identity primary key,
      tbl text not null, row_id text not null, from_state text, to_state text)`);
  await db.query(`
    create or replace function public.tg_test_log_transition() returns trigger language plpgsql as $$
    begin
      insert into public.test_transitions (tbl, row_id, from_state, to_state)
      values (tg_table_name, (to_jsonb(new) ->> 'id'), to_jsonb(old) ->> tg_argv[0], to_jsonb(new) ->> tg_argv[0]);
      return null;
    end $$`);
  await db.query(`drop trigger if exists _999_test_log on ${table}`);
  await db.query(`
    create trigger _999_test_log after update of ${column} on ${table} for each row
      when (old.${column} is distinct from new.${column})
      execute function public.tg_test_log_transition('${column}')`);
}

/** The states a row went through according to public.test_transitions, starting with its first from-state. */
export async function pathOf(db: Queryable, table: string, id: string): Promise<string[]> {
  const { rows } = await db.query<{ from_state: string; to_state: string }>(
    "select from_state, to_state from public.test_transitions where tbl = $1 and row_id = $2 order by seq",
    [table, id],
  );
  const first = rows[0];
  return first ? [first.from_state, ...rows.map((r) => r.to_state)] : [];
}
