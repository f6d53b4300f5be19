// The failover drill's short mode (docs/reliability.md, "Drill: failover"): `npm run drill:failover
// -- --short` creates a primary and a streaming standby of its own, fences the primary read-only,
// promotes the standby and switches the database's port to it while two replicas of the service
// and the App work through that port, following docs/runbook.md "After a database failover". Zero
// violations: not ready while writes fail, nothing committed lost, no command executed twice, every
// intent synced once, everything removed.
import test from "ava";
import { runScript } from "../helpers/run-process.js";

test("failover drill, short mode: promoted standby behind a switched port, zero violations", async (t) => {
  t.timeout(240_000);
  const {
    code,
    out,
    result: r,
    printed,
  } = await runScript(t, "scripts/drill-failover.ts", {
    args: ["--short"],
    resultPrefix: "DRILL_RESULT",
    timeoutMs: 240_000 - 10_000,
  });
  t.true(printed, "the drill printed its figures");
  t.log(
    `users ${r.users}; read-only ${r.readOnlySec} s; ready after ${JSON.stringify(r.readyAfterSwitchSec)}; edges ${JSON.stringify(r.recoveredEdges)}`,
  );
  t.true(
    r.users > 0 && (r.appRefused?.read_only ?? 0) > 0,
    "the App wrote before and was refused while read-only",
  );
  t.is(r.contactAdds, r.users, "one contact.add executed per user");
  t.is(r.violations, 0);
  const checked = out.split("\n").filter((l) => /^ {2}(ok {2}|FAIL) {2}/.test(l));
  t.true(checked.length >= 12, "every invariant is printed");
  t.true(out.includes("everything the drill created is removed"));
  t.is(code, 0);
});
