// The service's SIGTERM/SIGINT listeners (src/startup/stop-signals.ts), in a child process that sends
// signals to itself: a signal that arrives the moment the start ends, before Node has dispatched it,
// still stops the service (a listener swapped at that moment would drop it); one that came while
// starting is carried out once started, exactly once; after the start a signal stops at once.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import test from "ava";
import { projectRoot } from "../../../src/local/project-root.js";

const module = join(projectRoot, "src", "startup", "stop-signals.ts");

/** Runs `body` in a fresh Node with holdStopSignals imported; returns its stdout lines. */
function child(body: string): { lines: string[]; status: number | null } {
  const script = `
    const { holdStopSignals } = await import(${JSON.stringify(module)});
    const say = (s) => process.stdout.write(s + "\\n");
    ${body}
  `;
  const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: projectRoot,
    encoding: "utf8",
    timeout: 20_000,
  });
  return { lines: r.stdout.split("\n").filter(Boolean), status: r.status };
}

test("a SIGTERM that arrives as the start ends, not yet dispatched, still stops the service", (t) => {
  const r = child(`
    const signals = holdStopSignals((s) => say("deferred " + s));
    setTimeout(() => {
      process.kill(process.pid, "SIGTERM"); // delivered now, dispatched on the loop's next poll
      signals.started((s) => { say("stop " + s); process.exit(0); });
      setTimeout(() => { say("lost"); process.exit(3); }, 1000);
    }, 50);
  `);
  t.deepEqual(r.lines, ["stop SIGTERM"]);
  t.is(r.status, 0);
});

test("signals while starting: the first is kept and carried out once started, once", (t) => {
  const r = child(`
    const signals = holdStopSignals((s) => say("deferred " + s));
    process.kill(process.pid, "SIGINT");
    setTimeout(() => process.kill(process.pid, "SIGTERM"), 50);
    setTimeout(() => {
      signals.started((s) => say("stop " + s));
      setTimeout(() => process.exit(0), 200);
    }, 300);
  `);
  t.deepEqual(r.lines, ["deferred SIGINT", "stop SIGINT"]);
  t.is(r.status, 0);
});

test("once started, a signal stops at once, and the process is not killed by Node's default", (t) => {
  const r = child(`
    const signals = holdStopSignals((s) => say("deferred " + s));
    signals.started((s) => { say("stop " + s); setTimeout(() => process.exit(0), 100); });
    setTimeout(() => process.kill(process.pid, "SIGTERM"), 50);
    setTimeout(() => { say("lost"); process.exit(3); }, 2000);
  `);
  t.deepEqual(r.lines, ["stop SIGTERM"]);
  t.is(r.status, 0);
});
