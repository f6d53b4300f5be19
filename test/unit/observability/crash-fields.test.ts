// The crash line's fields (src/db/errors.ts crashFields): enough to find the bug, never the message.
import test from "ava";
import { crashFields } from "../../../src/db/errors.js";

test("a crash line names the class, a code and the frames, never the message", (t) => {
  const secret = "postgres://user:hunter2@db.internal/app +79991234567";
  const e = Object.assign(new TypeError(`cannot read ${secret}`), { code: "ERR_SOMETHING" });
  const f = crashFields(e);
  t.is(f.errorName, "TypeError");
  t.is(f.code, "ERR_SOMETHING");
  t.true((f.frames?.length ?? 0) > 0, "where it was thrown");
  t.true(f.frames?.[0]?.includes("crash-fields.test.ts"));
  t.false(JSON.stringify(f).includes("hunter2"));
  t.false(JSON.stringify(f).includes("79991234567"));
});

test("a SQLSTATE is kept as such; a code that is not an identifier is dropped", (t) => {
  const pgError = Object.assign(new Error("duplicate key value violates unique constraint"), {
    code: "23505",
  });
  t.like(crashFields(pgError), { errorName: "Error", sqlstate: "23505" });
  t.is(crashFields(pgError).code, undefined);
  t.is(crashFields(Object.assign(new Error("x"), { code: "user +7999 said" })).code, undefined);
  t.deepEqual(crashFields("a string"), { errorName: "string" });
});
