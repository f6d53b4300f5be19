// The long-outage drill's short mode (docs/reliability.md, "Drill: long portal outage"): `npm run
// drill:outage -- --short`, two replicas and the portal at its real ceiling; 40 s of 503s and
// timeouts while 100 users sign up and 20 change phones. Zero violations: nothing dead-lettered,
// degraded for crm_stale and never not ready, the backlog drained at the ceiling, nothing refused
// for rate after the recovery, every intent synced once.
import { spawn } from "node:child_process";
import test from "ava";
import { projectRoot } from "../../src/db/migrate.js";

test("outage drill, short mode: 503s and timeouts, then a drain at the ceiling; zero violations", async (t) => {
  t.timeout(240_000);
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/drill-outage.ts", "--short"], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp" },
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
    `outage requests ${r.outageRequests} ${JSON.stringify(r.outageFaults)}; drain ${r.drainRequests} requests in ${r.drainSec} s (ideal ${r.idealSec} s)`,
  );
  t.true(Object.keys(r.outageFaults ?? {}).length === 3, "503s and both kinds of timeout were served");
  t.is(r.refusedAfter, 0);
  t.is(r.deadLetters, 0);
  t.is(r.violations, 0);
  t.is(code, 0);
});
