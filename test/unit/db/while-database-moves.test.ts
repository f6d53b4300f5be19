// whileDatabaseMoves (src/db/errors.ts): a statement that gives a lease back is tried again while a
// failover refuses writes or drops connections, and only then.
import test from "ava";
import { whileDatabaseMoves } from "../../../src/db/errors.js";

const pgError = (code: string) => Object.assign(new Error(`sqlstate ${code}`), { code });

test("a refused write and a lost connection are tried again until the statement goes through", async (t) => {
  const errors = [pgError("25006"), new Error("Connection terminated unexpectedly"), pgError("57P01")];
  let calls = 0;
  const result = await whileDatabaseMoves(
    async () => {
      calls++;
      const e = errors.shift();
      if (e) throw e;
      return "released";
    },
    5,
    1,
  );
  t.is(result, "released");
  t.is(calls, 4);
});

test("any other error is thrown at once", async (t) => {
  let calls = 0;
  const e = await t.throwsAsync(
    whileDatabaseMoves(
      async () => {
        calls++;
        throw pgError("BS001");
      },
      5,
      1,
    ),
  );
  t.is((e as { code?: string }).code, "BS001");
  t.is(calls, 1);
});

test("after the last attempt the database's error is thrown", async (t) => {
  let calls = 0;
  const e = await t.throwsAsync(
    whileDatabaseMoves(
      async () => {
        calls++;
        throw pgError("25006");
      },
      3,
      1,
    ),
  );
  t.is((e as { code?: string }).code, "25006");
  t.is(calls, 3);
});
