// withSearchPath over every form of connection string node-postgres reads: to pg the result names the
// same server, database, user and password as the input, and carries the service's search path as a
// startup option (src/db/search-path.ts). pg's own reading (a Client's connection parameters; the
// Client is never connected) is the judge, not a parser of the test's.
import test from "ava";
import pg from "pg";
import { withSearchPath } from "../../../src/db/search-path.js";

interface Params {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  options?: string;
}

/** What pg makes of a connection string. */
function read(connectionString: string): Params {
  const c = new pg.Client({ connectionString }) as unknown as { connectionParameters: Params };
  const { host, port, database, user, password, options } = c.connectionParameters;
  return { host, port, database, user, password, options };
}

// The search path and row security off (a policy on an App table is refused, never run).
const PINNED = "-c search_path=pg_catalog,pg_temp -c row_security=off";

const FORMS: Record<string, string> = {
  "a URL with a host": "postgres://svc:s3cr%40t@db.internal:6432/han?sslmode=verify-full",
  "a socket directory in host=, no user": "postgresql:///han?host=/var/run/postgresql",
  "a socket directory in host=, user and password": "postgres://svc:s3cret@/han?host=/var/run/postgresql",
  "an encoded socket directory in host=": "postgres://svc@/han?host=%2Fvar%2Frun%2Fpostgresql&port=5433",
  "an encoded socket directory as the host": "postgres://svc:pw@%2Fvar%2Frun%2Fpostgresql/han",
  "pg's socket: scheme": "socket:/var/run/postgresql?db=han",
  "pg's directory and database": "/var/run/postgresql han",
  "pg's directory alone": "/var/run/postgresql",
  "a password with a space and a stray %": "postgres://svc:a b%zz@127.0.0.1/han",
};

for (const [form, input] of Object.entries(FORMS)) {
  test(`${form}: the same connection to pg, with the search path pinned`, (t) => {
    const before = read(input);
    const after = read(withSearchPath(input));
    t.is(before.options, undefined);
    t.is(after.options, PINNED);
    t.deepEqual({ ...after, options: undefined }, before);
  });
}

test("options the string carries stay, and the service's path comes after them (the later -c wins)", (t) => {
  for (const input of [
    "postgres://svc@db.internal/han?options=-c%20statement_timeout%3D5s",
    "postgres://svc@/han?host=/var/run/postgresql&options=-c%20search_path%3Dpublic",
  ]) {
    const before = read(input);
    const after = read(withSearchPath(input));
    t.is(after.options, `${before.options} ${PINNED}`);
    t.deepEqual({ ...after, options: undefined }, { ...before, options: undefined });
  }
});

test("a string pg cannot read either is refused without being quoted", (t) => {
  const input = "postgres://svc:hunter2@[not-a-host/han";
  t.throws(() => read(input));
  const e = t.throws(() => withSearchPath(input));
  t.false(e?.message.includes("hunter2"));
  t.regex(e?.message ?? "", /not one node-postgres can read/);
});
