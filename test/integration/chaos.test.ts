// The chaos suite's short mode (docs/reliability.md): `npm run chaos` with three replicas of the real
// service on its own embedded PostgreSQL and the emulator, faults injected for CHAOS_MINUTES, then
// settled and checked. Zero violations: no duplicate, no lost intent, no leak, the portal's limit kept.
import test from "ava";
import { runScript } from "../helpers/run-process.js";

/** Minutes of faults in CI: the whole run (startup, faults, settling, checks) stays near 2.5 min. */
const MINUTES = process.env.CHAOS_MINUTES ?? "0.75";

test("chaos, short mode: replicas killed, database and portal faults, webhook chaos; zero violations", async (t) => {
  // About 2 minutes; the settle may take up to its bounds (90 s for the work, each reconciliation
  // run, the work again) on a machine busy with the other test files.
  t.timeout(480_000);
  const {
    code,
    result: r,
    printed,
  } = await runScript(t, "scripts/chaos.ts", {
    env: { CHAOS_MINUTES: MINUTES },
    resultPrefix: "CHAOS_RESULT",
    timeoutMs: 480_000 - 30_000,
  });
  t.true(printed, "the run printed its figures");
  t.log(
    `faults ${JSON.stringify(r.faults)}; requests ${r.requests}; alert items moved ${JSON.stringify(r.alertMoves)}; settled in ${r.settleSeconds} s; load average ${r.loadAverage}; wall ${r.wallSeconds} s`,
  );
  t.true(Object.keys(r.faults ?? {}).length > 0, "faults were injected");
  t.true(r.contactAdds > 0, "the service created Contacts under the faults");
  t.true(r.alerts > 0, "business alerts were raised (and checked to be mirrored once each)");
  t.is(r.duplicates, 0);
  t.is(r.lostIntents, 0);
  t.is(r.violations, 0);
  t.is(code, 0);
});
