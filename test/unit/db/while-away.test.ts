// whileDatabaseAway (src/db/while-away.ts): a statement that records an outcome or gives a lease back
// is tried again while a restart or a failover refuses writes or drops connections, and only then,
// up to the holder's bound.
import test from "ava";
import { whileDatabaseAway } from "../../../src/db/while-away.js";

const pgError = (code: string) => Object.assign(new Error(`sqlstate ${code}`), { code });

test("a refused write and a lost connection are tried again until the statement goes through", async (t) => {
  const errors = [pgError("25006"), new Error("Connection terminated unexpectedly"), pgError("57P01")];
  let calls = 0;
  const result = await whileDatabaseAway(
    async () => {
      calls++;
      const e = errors.shift();
      if (e) throw e;
      return "released";
    },
    { until: Date.now() + 10_000 },
  );
  t.is(result, "released");
  t.is(calls, 4);
});

test("any other error is thrown at once", async (t) => {
  let calls = 0;
  const e = await t.throwsAsync(
    whileDatabaseAway(
      async () => {
        calls++;
        throw pgError("BS001");
      },
      { until: Date.now() + 10_000 },
    ),
  );
  t.is((e as { code?: string }).code, "BS001");
  t.is(calls, 1);
});

test("past the bound the database's error is thrown", async (t) => {
  let calls = 0;
  const e = await t.throwsAsync(
    whileDatabaseAway(
      async () => {
        calls++;
        throw pgError("25006");
      },
      { until: Date.now() + 500 },
    ),
  );
  t.is((e as { code?: string }).code, "25006");
  t.true(calls >= 2 && calls <= 4, `${calls} tries in half a second (pauses of 200 ms, then 400)`);
});
