// Several workflow steps in one transaction, their identical statements sent as one.
//
// A step is a short conversation with the database: about six statements, most of them a call of a
// bitrix_sync function, each costing the server more to parse, plan, start and answer than to run
// (docs/performance.md). The steps of a claimed batch ask the same questions at the same time, with
// different parameters. The batcher gives each step a client of its own whose queries it collects;
// when the connection is free it sends the collected queries grouped by their text, and a group of
// more than one as one statement that runs the original once per parameter set, in order:
//
//   select __b.__ord, __q.*
//     from unnest($1::uuid[], $2::text[]) with ordinality as __b(p1, p2, __ord)
//     cross join lateral (<the original statement, $1 read as __b.p1, ...>) as __q
//    order by __b.__ord
//
// Each call of a volatile function in it sees the writes of the calls before it, as separate
// statements would. A statement with a registered set form (registerSetForm) goes instead as one
// call of a set-based function over the same arrays: a group's issues move their workflows in one
// UPDATE and add their commands in one INSERT, its transitions move their workflows in one UPDATE,
// its new links are one INSERT, where the grouped form would run single-row statements per step. The statement is a
// server-side prepared statement named after a hash of its text. The parameter types come from
// PostgreSQL itself (PREPARE of the original text under a savepoint, once per text and process). A
// statement that cannot be grouped (not a SELECT, an array parameter, a `$` inside a literal) goes
// alone, as it would without the batcher.
//
// Everything runs in the caller's one transaction. The first failure (a statement's error, or a
// step that throws) fails the whole batch: every later query is refused at once, and the caller
// rolls back and runs each step again in a transaction of its own.
import { createHash } from "node:crypto";
import type pg from "pg";

type Values = readonly unknown[];

interface Pending {
  text: string;
  name?: string;
  values: Values;
  resolve: (r: pg.QueryResult) => void;
  reject: (e: unknown) => void;
}

/** A query as the steps send it: a text with values, or node-postgres' config object. */
type QueryArg = string | { text: string; values?: Values; name?: string };

/** Parameter types of a statement by its text (null: it is never grouped), cached per process. */
const typeCache = new Map<string, Promise<string[] | null>>();

/** Why a statement cannot be grouped, or null when it can; pure, for the tests. */
export function ungroupable(text: string): string | null {
  if (!/^\s*select\b/i.test(text)) return "not_select";
  if (text.includes("$$")) return "dollar_quote";
  // A `$n` inside a string literal would be rewritten too.
  if (/'[^']*\$[^']*'/.test(text)) return "dollar_in_literal";
  if (text.includes(";")) return "semicolon";
  if (!/\$\d/.test(text)) return "no_parameters";
  return null;
}

/** The grouped form of `text` for parameters of `types` (see the top of this file). */
export function groupedText(text: string, types: readonly string[]): string {
  const cols = types.map((_, i) => `p${i + 1}`).join(", ");
  const arrays = types.map((t, i) => `$${i + 1}::${t}[]`).join(", ");
  const inner = text.replace(/\$(\d+)/g, (_, n: string) => `__b.p${n}`);
  return (
    `select __b.__ord, __q.* from unnest(${arrays}) with ordinality as __b(${cols}, __ord) ` +
    `cross join lateral (${inner}) as __q order by __b.__ord`
  );
}

/**
 * Set forms: for a statement whose group is better served by one set-based call than by running the
 * original once per parameter set (a function that writes one row per call pays PostgreSQL's fixed
 * cost of each of its statements per row), the text sent in place of the grouped form. It takes the
 * same parameters as arrays ($1 the first parameters of every query, ...), all or nothing as the
 * grouped form is, and returns `__ord` (the query's 1-based place in the group) and the original's
 * columns. The module that owns the statement registers it (src/workflows/step/core.ts: the
 * issue, the transition and the new link of a step).
 */
const setForms = new Map<string, string>();

/** Registers `setText` as the set form of `original` (see setForms). */
export function registerSetForm(original: string, setText: string): void {
  const known = setForms.get(original);
  if (known !== undefined && known !== setText) throw new Error(`a second set form for: ${original}`);
  if (ungroupable(original) !== null)
    throw new Error(`a set form for a statement never grouped: ${original}`);
  setForms.set(original, setText);
}

/** The set form registered for `original`, if any: for the tests. */
export function setFormOf(original: string): string | undefined {
  return setForms.get(original);
}

/** The grouped text of a statement and the name it is prepared under, computed once per text. */
const groupedCache = new Map<string, { text: string; name: string }>();

function groupedStatement(original: string, types: readonly string[]): { text: string; name: string } {
  let g = groupedCache.get(original);
  if (!g) {
    const text = setForms.get(original) ?? groupedText(original, types);
    g = { text, name: `bitrix_sync_b_${createHash("sha1").update(text).digest("hex").slice(0, 24)}` };
    groupedCache.set(original, g);
  }
  return g;
}

async function parameterTypes(conn: pg.PoolClient, text: string): Promise<string[] | null> {
  let cached = typeCache.get(text);
  if (!cached) {
    cached = probeTypes(conn, text);
    typeCache.set(text, cached);
    // Only an answer is kept: a probe cut short (a lost connection) is tried again next time.
    cached.catch(() => typeCache.delete(text));
  }
  return await cached;
}

/**
 * Asks PostgreSQL for the statement's parameter types: PREPARE it under a savepoint, read
 * pg_prepared_statements, DEALLOCATE. It runs on the batch's own connection, so it never waits for
 * a pool that the batches themselves may have emptied; a refusal rolls back to the savepoint only.
 */
async function probeTypes(conn: pg.PoolClient, text: string): Promise<string[] | null> {
  await conn.query("savepoint bitrix_sync_batch_probe");
  try {
    await conn.query(`prepare bitrix_sync_batch_probe as ${text}`);
    const { rows } = await conn.query<{ types: string[] }>(
      "select parameter_types::text[] as types from pg_prepared_statements where name = 'bitrix_sync_batch_probe'",
    );
    await conn.query("deallocate bitrix_sync_batch_probe");
    await conn.query("release savepoint bitrix_sync_batch_probe");
    const types = rows[0]?.types ?? null;
    // Array parameters would be flattened by unnest; 'unknown' cannot be cast to an array.
    if (!types || types.length === 0 || types.some((t) => t.endsWith("[]") || t === "unknown")) return null;
    return types;
  } catch (e) {
    await conn.query("rollback to savepoint bitrix_sync_batch_probe");
    const { rows } = await conn.query(
      "select 1 from pg_prepared_statements where name = 'bitrix_sync_batch_probe'",
    );
    if (rows.length > 0) await conn.query("deallocate bitrix_sync_batch_probe");
    await conn.query("release savepoint bitrix_sync_batch_probe");
    // Only a refusal of the statement itself (class 42: syntax, names, types) is kept; a timeout or
    // a lost connection fails this batch and the text is probed again next time.
    if (!/^42/.test((e as { code?: string }).code ?? "")) throw e;
    return null;
  }
}

export class StatementBatcher {
  readonly #conn: pg.PoolClient;
  #queue: Pending[] = [];
  #draining = false;
  #failure: { error: unknown } | null = null;
  /** Statements sent, queries that travelled in a grouped one, grouped ones sent as a set form: for the tests. */
  readonly stats = { statements: 0, grouped: 0, setForms: 0 };

  constructor(conn: pg.PoolClient) {
    this.#conn = conn;
  }

  /** The first failure of the batch, if any. */
  get failure(): { error: unknown } | null {
    return this.#failure;
  }

  /** Fails the batch: nothing more is sent, every waiting and later query is refused. */
  fail(error: unknown): void {
    if (this.#failure) return;
    this.#failure = { error };
    const queued = this.#queue;
    this.#queue = [];
    for (const p of queued) p.reject(error);
  }

  /** A client for one step: only `query` is offered, as the step code uses nothing else. */
  client(): pg.PoolClient {
    const query = (arg: QueryArg, values?: Values) => this.#enqueue(arg, values);
    return { query } as unknown as pg.PoolClient;
  }

  #enqueue(arg: QueryArg, values?: Values): Promise<pg.QueryResult> {
    const text = typeof arg === "string" ? arg : arg.text;
    const name = typeof arg === "string" ? undefined : arg.name;
    const vals = (typeof arg === "string" ? values : (arg.values ?? values)) ?? [];
    return new Promise((resolve, reject) => {
      if (this.#failure) return reject(this.#failure.error);
      this.#queue.push({ text, name, values: vals, resolve, reject });
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#draining) return;
    this.#draining = true;
    // After the current tick: the steps resumed by the last answer ask their next questions first.
    setImmediate(() => {
      this.#drain().then(
        () => undefined,
        (e) => this.fail(e),
      );
    });
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#failure) {
        const taken = this.#queue;
        this.#queue = [];
        const groups = new Map<string, Pending[]>();
        for (const p of taken) {
          const g = groups.get(p.text);
          if (g) g.push(p);
          else groups.set(p.text, [p]);
        }
        for (const g of groups.values()) {
          const failed = this.failure;
          if (failed) {
            for (const p of g) p.reject(failed.error);
            continue;
          }
          await this.#send(g);
        }
        // Let the steps just answered enqueue their next queries before the next round.
        await new Promise<void>((r) => setImmediate(r));
      }
    } finally {
      this.#draining = false;
      if (this.#queue.length > 0 && !this.#failure) this.#schedule();
    }
  }

  async #send(group: Pending[]): Promise<void> {
    const first = group[0] as Pending;
    let types: string[] | null = null;
    if (
      group.length > 1 &&
      ungroupable(first.text) === null &&
      group.every((p) => p.values.every((v) => !Array.isArray(v)))
    ) {
      try {
        types = await parameterTypes(this.#conn, first.text);
      } catch (e) {
        for (const p of group) p.reject(e);
        this.fail(e);
        return;
      }
    }
    if (!types || group.some((p) => p.values.length !== types.length)) {
      for (const p of group) {
        if (this.#failure) {
          p.reject(this.#failure.error);
          continue;
        }
        try {
          this.stats.statements++;
          const r = await this.#conn.query(
            p.name
              ? { name: p.name, text: p.text, values: [...p.values] }
              : { text: p.text, values: [...p.values] },
          );
          p.resolve(r);
        } catch (e) {
          p.reject(e);
          this.fail(e);
        }
      }
      return;
    }
    const { text, name } = groupedStatement(first.text, types);
    const columns = types.map((_, i) => group.map((p) => p.values[i] ?? null));
    let r: pg.QueryResult;
    try {
      this.stats.statements++;
      r = await this.#conn.query({
        name,
        text,
        values: columns,
      });
    } catch (e) {
      for (const p of group) p.reject(e);
      this.fail(e);
      return;
    }
    this.stats.grouped += group.length;
    if (setForms.has(first.text)) this.stats.setForms++;
    const fields = r.fields.filter((f) => f.name !== "__ord");
    const byOrd: Array<Array<Record<string, unknown>>> = group.map(() => []);
    for (const row of r.rows as Array<Record<string, unknown>>) {
      const { __ord, ...rest } = row;
      byOrd[Number(__ord) - 1]?.push(rest);
    }
    group.forEach((p, i) => {
      const rows = byOrd[i] ?? [];
      p.resolve({ command: "SELECT", rowCount: rows.length, oid: 0, fields, rows } as pg.QueryResult);
    });
  }
}
