// graphile-worker 0.17.3 records a finished job without awaiting it and does not retry a refused
// connection, so a database restart at that moment used to end the service with an unhandled
// rejection (the chaos suite's replica crashes). main.ts now logs exactly that rejection and carries
// on (src/db/errors.ts isJobBookkeepingLoss). This reproduces it with the real runner and checks
// that the classifier recognises it, and that it recognises nothing else.
import test from "ava";
import { isJobBookkeepingLoss } from "../../src/db/errors.js";
import { cleanEnv, runProcess } from "../helpers/run-process.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("a job finished while the database is unreachable: graphile-worker's rejection is the one main.ts tolerates", async (t) => {
  const r = await runProcess(
    process.execPath,
    ["--import", "tsx", "test/helpers/job-bookkeeping-child.ts"],
    cleanEnv({ DATABASE_URL: db.url }),
    60_000,
  );
  t.false(r.timedOut, r.stderr);
  const line = r.stdout.split("\n").find((l) => l.startsWith("{"));
  const out = JSON.parse(line ?? "{}");
  t.true(out.unhandled, `the runner's completion was not left unhandled: ${r.stdout} ${r.stderr}`);
  t.true(out.connectionLost);
  t.true(out.bookkeeping);
});

test("any other rejection is still a crash", (t) => {
  const lost = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
  t.false(isJobBookkeepingLoss(lost), "a lost connection of the service's own code");
  const other = new TypeError("x is undefined");
  other.stack = `TypeError: x\n    at batchCompleteJobs (/app/node_modules/graphile-worker/dist/sql/completeJobs.js:52:5)`;
  t.false(isJobBookkeepingLoss(other), "a bug inside the completion, not a lost connection");
  const theOne = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
  theOne.stack = `Error: connect ECONNREFUSED\n    at async batchCompleteJobs (/app/node_modules/graphile-worker/dist/sql/completeJobs.js:52:5)`;
  t.true(isJobBookkeepingLoss(theOne));
  // A fenced primary (read-only) refuses the same completion with 25006 (npm run drill:failover).
  const readOnly = Object.assign(new Error("cannot execute UPDATE in a read-only transaction"), {
    code: "25006",
  });
  readOnly.stack = `error: cannot execute UPDATE in a read-only transaction\n    at async batchCompleteJobs (/app/node_modules/graphile-worker/dist/sql/completeJobs.js:52:5)`;
  t.true(isJobBookkeepingLoss(readOnly), "a write refused by a read-only server");
  const ownReadOnly = Object.assign(new Error("read-only"), { code: "25006" });
  t.false(isJobBookkeepingLoss(ownReadOnly), "a refused write of the service's own code");
  t.false(isJobBookkeepingLoss("ECONNREFUSED"));
});
