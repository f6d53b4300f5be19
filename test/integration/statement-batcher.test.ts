// The statement batcher (src/db/statement-batcher.ts, issue 14): the steps of a group share one
// transaction, and identical statements asked at the same time reach PostgreSQL as one. Each caller
// gets exactly its own rows, side effects happen in the callers' order, statements that cannot be
// grouped go alone, and the first failure fails the whole group.
import test from "ava";
import { groupedText, StatementBatcher, ungroupable } from "../../src/db/statement-batcher.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  await db.pool.query("create table batch_log (n serial primary key, who text not null)");
  await db.pool.query(
    `create function log_call(p_who text) returns bigint language plpgsql as $$
     declare v bigint; begin insert into batch_log (who) values (p_who) returning n into v; return v; end $$`,
  );
});
test.after.always(async () => {
  await db?.drop();
});

/** Runs `fn` with a batcher in one transaction, rolled back; returns what it returned and the stats. */
async function withBatcher<T>(
  fn: (b: StatementBatcher) => Promise<T>,
): Promise<{ out: T; stats: StatementBatcher["stats"] }> {
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    const b = new StatementBatcher(c);
    const out = await fn(b);
    return { out, stats: { ...b.stats } };
  } finally {
    await c.query("rollback").catch(() => undefined);
    c.release();
  }
}

test("identical statements asked together go as one, and each caller gets its own rows", async (t) => {
  const { out, stats } = await withBatcher(async (b) =>
    Promise.all(
      [0, 1, 3, 2].map(async (n) => {
        const { rows, rowCount } = await b
          .client()
          .query<{ g: number; label: string }>(
            "select g, $2::text as label from generate_series(1, $1::int) g order by g",
            [n, `caller-${n}`],
          );
        return { n, rows, rowCount };
      }),
    ),
  );
  for (const { n, rows, rowCount } of out) {
    t.is(rowCount, n);
    t.deepEqual(
      rows.map((r) => r.g),
      Array.from({ length: n }, (_, i) => i + 1),
    );
    t.true(rows.every((r) => r.label === `caller-${n}` && !("__ord" in r)));
  }
  t.is(stats.statements, 1);
  t.is(stats.grouped, 4);
});

test("calls of a volatile function run in the callers' order and see each other's writes", async (t) => {
  const { out, stats } = await withBatcher(async (b) => {
    const who = ["a", "b", "c", "d", "e"];
    const ns = await Promise.all(
      who.map(
        async (w) => (await b.client().query<{ n: string }>("select log_call($1) as n", [w])).rows[0]?.n,
      ),
    );
    const seen = await b.client().query<{ who: string }>("select who from batch_log order by n");
    return { ns: ns.map(Number), order: seen.rows.map((r) => r.who) };
  });
  t.deepEqual(out.order, ["a", "b", "c", "d", "e"]);
  t.true(out.ns.every((n, i) => i === 0 || n > (out.ns[i - 1] as number)));
  t.is(stats.statements, 2);
});

test("statements that cannot be grouped go alone, with the same answers", async (t) => {
  const { out, stats } = await withBatcher(async (b) =>
    Promise.all([
      b.client().query("insert into batch_log (who) values ($1) returning who", ["x"]),
      b.client().query("insert into batch_log (who) values ($1) returning who", ["y"]),
      b.client().query<{ n: number }>("select cardinality($1::int[]) as n", [[1, 2, 3]]),
      b.client().query<{ n: number }>("select cardinality($1::int[]) as n", [[1]]),
    ]),
  );
  t.deepEqual(
    out.map((r) => r.rows[0]),
    [{ who: "x" }, { who: "y" }, { n: 3 }, { n: 1 }],
  );
  t.is(stats.statements, 4);
  t.is(stats.grouped, 0);
});

test("named statements keep working, grouped or alone", async (t) => {
  const q = (b: StatementBatcher, v: number) =>
    b
      .client()
      .query<{ v: number }>({ name: "batcher-test-named", text: "select $1::int + 1 as v", values: [v] });
  const { out } = await withBatcher(async (b) => {
    const together = await Promise.all([q(b, 1), q(b, 2)]);
    const alone = await q(b, 10);
    return [...together, alone].map((r) => r.rows[0]?.v);
  });
  t.deepEqual(out, [2, 3, 11]);
});

test("the first failure fails every query of the group, asked before or after it", async (t) => {
  const { out } = await withBatcher(async (b) => {
    const results = await Promise.allSettled([
      b.client().query("select 1 / $1::int as v", [0]),
      b.client().query("select 1 / $1::int as v", [1]),
      b.client().query("select $1::text as other", ["x"]),
    ]);
    const later = await b
      .client()
      .query("select 1 as v")
      .then(
        () => "answered",
        (e: { code?: string }) => e.code,
      );
    return {
      codes: results.map((r) => (r.status === "rejected" ? (r.reason as { code?: string }).code : "ok")),
      later,
      failed: b.failure !== null,
    };
  });
  t.deepEqual(out.codes, ["22012", "22012", "22012"]);
  t.is(out.later, "22012");
  t.true(out.failed);
});

test("a step that throws fails the group: nothing more is sent", async (t) => {
  const { out, stats } = await withBatcher(async (b) => {
    b.fail(new Error("step failed"));
    return await b
      .client()
      .query("select 1")
      .then(
        () => "answered",
        (e: Error) => e.message,
      );
  });
  t.is(out, "step failed");
  t.is(stats.statements, 0);
});

test("the grouped form and the rules for what is grouped", (t) => {
  t.is(
    groupedText("select f($1, $2) as x", ["uuid", "text"]),
    "select __b.__ord, __q.* from unnest($1::uuid[], $2::text[]) with ordinality as __b(p1, p2, __ord) " +
      "cross join lateral (select f(__b.p1, __b.p2) as x) as __q order by __b.__ord",
  );
  t.is(ungroupable("select f($1)"), null);
  t.is(ungroupable("update t set a = $1"), "not_select");
  t.is(ungroupable("select '$1' || $1"), "dollar_in_literal");
  t.is(ungroupable("select 1"), "no_parameters");
  t.is(ungroupable("select $1; select 2"), "semicolon");
});

test("a statement PostgreSQL refuses is sent alone and fails the group with its own error", async (t) => {
  const { out } = await withBatcher(async (b) => {
    const results = await Promise.allSettled([
      b.client().query("select no_such_column from pg_class where oid = $1::oid", [1]),
      b.client().query("select no_such_column from pg_class where oid = $1::oid", [2]),
    ]);
    return results.map((r) => (r.status === "rejected" ? (r.reason as { code?: string }).code : "ok"));
  });
  t.deepEqual(out, ["42703", "42703"]);
});
