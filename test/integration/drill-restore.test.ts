// The restore drill's short mode (docs/reliability.md, "Drills"): `npm run drill:restore -- --short`
// on the test server, through its real code: replicas of the service, pg_dump under traffic,
// pg_restore into a fresh database, the forgotten users back with the same phones, the runbook's
// post-restore steps. Every invariant holds and is printed.
import { spawn } from "node:child_process";
import test from "ava";
import { projectRoot } from "../../src/db/migrate.js";
import { serverUrl } from "../helpers/testdb.js";

test("drill:restore, short mode: no duplicate Contact, the runbook's steps leave every active user in step", async (t) => {
  // About 90 s alone; CI runs other test files beside it.
  t.timeout(300_000);
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/drill-restore.ts", "--short"], {
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
