// The long-outage drill's short mode (docs/reliability.md, "Drill: long portal outage"): `npm run
// drill:outage -- --short`, two replicas and the portal at its real ceiling; 40 s of 503s and
// timeouts while 100 users sign up and 20 change phones. Zero violations: nothing dead-lettered,
// degraded for crm_stale and never not ready, the backlog drained at the ceiling, nothing refused
// for rate after the recovery, every intent synced once.
import test from "ava";
import { runScript } from "../helpers/run-process.js";

test("outage drill, short mode: 503s and timeouts, then a drain at the ceiling; zero violations", async (t) => {
  t.timeout(240_000);
  const {
    code,
    result: r,
    printed,
  } = await runScript(t, "scripts/drill-outage.ts", {
    args: ["--short"],
    resultPrefix: "DRILL_RESULT",
    timeoutMs: 240_000 - 10_000,
  });
  t.true(printed, "the drill printed its figures");
  t.log(
    `outage requests ${r.outageRequests} ${JSON.stringify(r.outageFaults)}; drain ${r.drainRequests} requests in ${r.drainSec} s (ideal ${r.idealSec} s)`,
  );
  t.true(Object.keys(r.outageFaults ?? {}).length === 3, "503s and both kinds of timeout were served");
  t.is(r.refusedAfter, 0);
  t.is(r.deadLetters, 0);
  t.is(r.violations, 0);
  t.is(code, 0);
});
