// The rolling-upgrade drill's short mode (docs/reliability.md, "Drills"): `npm run drill:upgrade --
// --short` from the release of 000027 (6156766) to this checkout, through its real code: the
// earlier release unpacked from git and installed once (npm ci, cached under .drill-cache/), its
// replicas under traffic while this release's migrations are applied, this release's replicas beside
// them, the earlier ones stopped. Every invariant holds and is printed.
import test from "ava";
import { runScript } from "../helpers/run-process.js";
import { serverUrl } from "../helpers/testdb.js";

test("drill:upgrade, short mode from 6156766: migrations frozen, readiness honest, every intent synced once", async (t) => {
  // The first run in a fresh clone installs the earlier release (npm ci, about half a minute).
  t.timeout(420_000);
  const {
    code,
    out,
    result: r,
    printed,
  } = await runScript(t, "scripts/drill-upgrade.ts", {
    args: ["--short"],
    env: { DRILL_DATABASE_URL: serverUrl() },
    resultPrefix: "DRILL_RESULT",
    timeoutMs: 420_000 - 10_000,
  });
  t.true(printed, "the drill printed its figures");
  t.log(
    `wall ${r.wallSeconds} s (earlier release ${r.earlierCached ? "cached" : `installed in ${r.earlierInstallSeconds} s`}); migrate ${r.migrateSeconds} s; readiness ${JSON.stringify(r.readiness)}`,
  );
  t.is(r.frozenCompared, 23, "000001 to 000027 of the earlier release compared byte for byte");
  t.true(r.contactAdds > 0, "Contacts were created across the upgrade");
  t.true((r.readiness?.this?.ready ?? 0) > 0, "this release's replicas were sampled ready");
  t.is(r.duplicates, 0);
  t.is(r.lostIntents, 0);
  t.is(r.violations, 0);
  t.true((out.match(/^ {2}ok {3}/gm) ?? []).length >= 15);
  t.false(/^ {2}FAIL /m.test(out));
  t.is(code, 0);
});
