// The rollback drill's short mode (docs/reliability.md, "Rolling back"): `npm run drill:rollback --
// --short` from the previous release (the newest commit whose committed migrations are exactly the
// released ones, today 7ba6d95) to this checkout and back, through the real code of both: the
// previous release unpacked from git and installed once (npm ci, cached under .drill-cache/), its
// replicas replaced by this release's after the migration, then this release's replaced by the
// previous release's on the new schema, a pause longer than the retry horizon while the portal
// fails, and the resume. Every invariant holds and is printed.
import test from "ava";
import { runScript } from "../helpers/run-process.js";
import { serverUrl } from "../helpers/testdb.js";

test("drill:rollback, short mode: forward and back without a downgrade, a pause past the horizon, nothing lost", async (t) => {
  // The first run in a fresh clone installs the previous release (npm ci, about half a minute).
  t.timeout(720_000);
  const {
    code,
    out,
    result: r,
    printed,
  } = await runScript(t, "scripts/drill-rollback.ts", {
    args: ["--short"],
    env: { DRILL_DATABASE_URL: serverUrl() },
    resultPrefix: "DRILL_RESULT",
    timeoutMs: 720_000 - 10_000,
  });
  t.true(printed, "the drill printed its figures");
  t.log(
    `wall ${r.wallSeconds} s (previous release ${r.previousCached ? "cached" : `installed in ${r.previousInstallSeconds} s`}); migrate ${r.migrateSeconds} s; pause ${JSON.stringify(r.pause)}; readiness ${JSON.stringify(r.readiness)}`,
  );
  t.is(r.frozenCompared, 31, "000001 to 000035 of the previous release compared byte for byte");
  t.is(r.allNotReadyRounds, 0, "the receivers were never all not ready");
  t.true((r.readiness?.previous?.ready ?? 0) > 0 && (r.readiness?.this?.ready ?? 0) > 0);
  t.true(r.pause.pausedSec > r.pause.horizonSec, "the pause outlasted the retry horizon");
  t.true(
    r.pause.intentsDuringPause > 0 && r.pause.webhooksDuringPause > 0,
    "work was recorded during the pause",
  );
  t.true(r.contactAdds > 0, "Contacts were created");
  t.is(r.duplicates, 0);
  t.is(r.lostIntents, 0);
  t.is(r.deadLetters, 0);
  t.is(r.violations, 0);
  t.true((out.match(/^ {2}ok {3}/gm) ?? []).length >= 25);
  t.false(/^ {2}FAIL /m.test(out));
  t.is(code, 0);
});
