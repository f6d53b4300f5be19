// The chaos suite's short mode (docs/reliability.md): `npm run chaos` with three replicas of the real
// service on its own embedded PostgreSQL and the emulator, faults injected for CHAOS_MINUTES, then
// settled and checked. Zero violations: no duplicate, no lost intent, no leak, the portal's limit kept.
import { spawn } from "node:child_process";
import test from "ava";
import { projectRoot } from "../../src/db/migrate.js";

/** Minutes of faults in CI: the whole run (startup, faults, settling, checks) stays near 2.5 min. */
const MINUTES = process.env.CHAOS_MINUTES ?? "0.75";

test("chaos, short mode: replicas killed, database and portal faults, webhook chaos; zero violations", async (t) => {
  t.timeout(240_000);
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/chaos.ts"], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", CHAOS_MINUTES: MINUTES },
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
  const line = out.split("\n").find((l) => l.startsWith("CHAOS_RESULT "));
  if (code !== 0 || !line) t.log(out.split("\n").slice(-60).join("\n"));
  t.truthy(line, "the run printed its figures");
  const r = JSON.parse((line ?? "CHAOS_RESULT {}").slice("CHAOS_RESULT ".length));
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
