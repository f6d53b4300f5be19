// Sandbox mode (the built-in emulator) just works on a database that has never had a cutover: the
// service performs it at start, once, and processes what the App records afterwards (§17 gate).
// Runs the real src/main.ts as a child process.
import { randomBytes } from "node:crypto";
import test from "ava";
import pg from "pg";
import { withDatabase } from "../../src/db/url.js";
import { SANDBOX_DATABASE_MARK } from "../../src/startup/sandbox-database.js";
import { waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { startService } from "../helpers/service-process.js";
import { one } from "../helpers/sql-core.js";
import { serverUrl } from "../helpers/testdb.js";

// Sandbox mode runs on a configured database only with BITRIX_SYNC_SANDBOX=true and only on one it
// created: this test names a database that does not exist yet, and the service creates, marks and
// migrates it.
const name = `bs_sbx_${randomBytes(6).toString("hex")}`;
const url = withDatabase(serverUrl(), name);
const pool = new pg.Pool({ connectionString: url, max: 4 });
pool.on("error", () => undefined);
const db = { pool };
test.after.always(async () => {
  await pool.end();
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await admin.connect();
  try {
    await admin.query(`drop database if exists ${name} with (force)`);
  } finally {
    await admin.end();
  }
});

test("sandbox mode creates its database, performs the cutover at start and then processes new intents", async (t) => {
  const env = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_DATABASE_URL: url,
    BITRIX_SYNC_SANDBOX: "true",
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
  };
  const first = startService(env);
  try {
    // Until the service has created and migrated it, the database or the table is not there yet.
    const cutover = await waitFor(
      async () =>
        (
          await db.pool
            .query<{ performed_by: string }>("select performed_by from bitrix_sync.cutover")
            .catch(() => ({ rows: [] }))
        ).rows[0],
      60_000,
      "the sandbox cutover",
    );
    t.is(cutover.performed_by, "sandbox");
    const u = await makeUser(db.pool, { phone: randomPhone() });
    const wf = await waitFor(
      async () =>
        (
          await db.pool.query<{ state: string }>(
            "select state from bitrix_sync.workflow_instances where user_id = $1 and state = 'succeeded'",
            [u.id],
          )
        ).rows[0],
      30_000,
      "the new user's workflow",
    );
    t.is(wf.state, "succeeded");
  } finally {
    first.child.kill("SIGTERM");
    await first.exited;
  }
  t.true(first.output.join("").includes('"event":"sandbox.database_created"'));
  t.true(first.output.join("").includes('"event":"sandbox.cutover"'));
  const mark = await one<{ note: string }>(
    db.pool,
    "select shobj_description(oid, 'pg_database') as note from pg_database where datname = current_database()",
  );
  t.true(mark.note.startsWith(SANDBOX_DATABASE_MARK));

  // A second start finds the cutover done and changes nothing.
  const second = startService(env);
  try {
    await waitFor(
      async () => second.output.join("").includes('"event":"http.listening"'),
      30_000,
      "the restart",
    );
  } finally {
    second.child.kill("SIGTERM");
    await second.exited;
  }
  t.false(second.output.join("").includes('"event":"sandbox.cutover"'), "performed once");
  t.false(second.output.join("").includes('"event":"sandbox.database_created"'), "created once");
  const n = await one<{ n: number }>(db.pool, "select count(*)::int as n from bitrix_sync.cutover");
  t.is(n.n, 1);
});
