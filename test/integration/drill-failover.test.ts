// The failover drill's short mode (docs/reliability.md, "Drill: failover"): `npm run drill:failover
// -- --short` creates a primary and a streaming standby of its own, fences the primary read-only,
// promotes the standby and switches the database's port to it while two replicas of the service
// and the App work through that port, following docs/runbook.md "After a database failover". Zero
// violations: not ready while writes fail, nothing committed lost, no command executed twice, every
// intent synced once, everything removed.
import { spawn } from "node:child_process";
import test from "ava";
import { projectRoot } from "../../src/db/migrate.js";

test("failover drill, short mode: promoted standby behind a switched port, zero violations", async (t) => {
  t.timeout(240_000);
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/drill-failover.ts", "--short"], {
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
