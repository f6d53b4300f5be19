// The restore drill's short mode (docs/reliability.md, "Drills"): `npm run drill:restore -- --short`
// on the test server, through its real code: replicas of the service, pg_dump under traffic,
// pg_restore into a fresh database, the forgotten users back with the same phones, the runbook's
// post-restore steps. Every invariant holds and is printed.
import test from "ava";
import { runScript } from "../helpers/run-process.js";
import { serverUrl } from "../helpers/testdb.js";

test("drill:restore, short mode: no duplicate Contact, the runbook's steps leave every active user in step", async (t) => {
  // About 90 s alone; CI runs other test files beside it.
  t.timeout(300_000);
  const {
    code,
    out,
    result: r,
    printed,
  } = await runScript(t, "scripts/drill-restore.ts", {
    args: ["--short"],
    env: { DRILL_DATABASE_URL: serverUrl() },
    resultPrefix: "DRILL_RESULT",
    timeoutMs: 300_000 - 10_000,
  });
  t.true(printed, "the drill printed its figures");
  t.log(`wall ${r.wallSeconds} s; drift found ${JSON.stringify(r.driftFound)}; taken over ${r.takenOver}`);
  t.true(r.forgotten > 0, "the restore forgot users whose Contacts the portal kept");
  t.true(r.signedUpAgain > 0, "forgotten users signed up again with the same phones");
  t.true(Object.keys(r.driftFound ?? {}).length > 0, "the first full audit found the drift the restore left");
  t.deepEqual(r.driftAfter, {}, "the second full audit found nothing");
  t.is(r.duplicates, 0);
  t.is(r.violations, 0);
  // The checker printed each invariant it verified, and none failed.
  t.true((out.match(/^ {2}ok {3}/gm) ?? []).length >= 15);
  t.false(/^ {2}FAIL /m.test(out));
  t.is(code, 0);
});
