// The rolling-upgrade drill's short mode (docs/reliability.md, "Drills"): `npm run drill:upgrade --
// --short` from the release of 000027 (6156766) to this checkout, through its real code: the
// earlier release unpacked from git and installed once (npm ci, cached under .drill-cache/), its
// replicas under traffic while this release's migrations are applied, this release's replicas beside
// them, the earlier ones stopped. Every invariant holds and is printed.
import { spawn } from "node:child_process";
import test from "ava";
import { projectRoot } from "../../src/db/migrate.js";
import { serverUrl } from "../helpers/testdb.js";

test("drill:upgrade, short mode from 6156766: migrations frozen, readiness honest, every intent synced once", async (t) => {
  // The first run in a fresh clone installs the earlier release (npm ci, about half a minute).
  t.timeout(420_000);
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/drill-upgrade.ts", "--short"], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", DRILL_DATABASE_URL: serverUrl() },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  child.stderr.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
  const line = out.split("\n").find((l) => l.startsWith("DRILL_RESULT "));
  if (code !== 0 || !line) t.log(out.split("\n").slice(-60).join("\n"));
  t.truthy(line, "the drill printed its figures");
  const r = JSON.parse((line ?? "DRILL_RESULT {}").slice("DRILL_RESULT ".length));
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
