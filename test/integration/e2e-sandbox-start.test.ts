// `npm start` with nothing configured (sandbox mode: the built-in emulator) still just works on a
// database that has never had a cutover: the service performs it at start, once, and processes what
// the App records afterwards (§17 gate, issue 10). Runs the real src/main.ts as a child process.
import test from "ava";
import { waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { startService } from "../helpers/service-process.js";
import { one } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb({ cutover: false });
});
test.after.always(async () => {
  await db?.drop();
});

test("sandbox mode performs the cutover at start and then processes new intents", async (t) => {
  const env = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "/tmp",
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_DATABASE_URL: db.url,
    BITRIX_SYNC_MIGRATE_ON_START: "false",
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
  };
  const first = startService(env);
  try {
    const cutover = await waitFor(
      async () =>
        (await db.pool.query<{ performed_by: string }>("select performed_by from bitrix_sync.cutover"))
          .rows[0],
      30_000,
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
  t.true(first.output.join("").includes('"event":"sandbox.cutover"'));

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
  const n = await one<{ n: number }>(db.pool, "select count(*)::int as n from bitrix_sync.cutover");
  t.is(n.n, 1);
});
