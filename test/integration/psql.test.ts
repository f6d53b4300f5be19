// `npm run psql` opens psql on the configured database whatever else is configured: it runs no sync,
// so a database without a CRM webhook (which `npm start` refuses: sandbox mode fails closed) is
// still one it opens, and the password never reaches its command line.
import { spawnSync } from "node:child_process";
import test from "ava";
import { cleanEnv, runProcess } from "../helpers/run-process.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

const hasPsql = spawnSync("psql", ["--version"]).status === 0;
const run = hasPsql ? test : test.skip;

let db: TestDb | undefined;
test.before(async () => {
  if (hasPsql) db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

run("a configured database without a CRM webhook opens", async (t) => {
  const r = await runProcess(
    "npm",
    ["run", "--silent", "psql", "--", "-Atc", "select count(*) from bitrix_sync.cutover"],
    cleanEnv({ SECRETS_SOURCE: "env", BITRIX_SYNC_DATABASE_URL: (db as TestDb).url }),
    60_000,
  );
  t.is(r.code, 0, r.stderr);
  t.is(r.stdout.trim(), "1");
});
