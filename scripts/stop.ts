// `npm run stop`: stops the sandbox service that runs from the local data folder (for example the one
// `npm run demo` started in the background), the way an orchestrator does: SIGTERM, then wait.
// Exit codes: 0 stopped (or nothing was running); 1 it did not stop within 40 s.
import { loadConfig } from "../src/config/env.js";
import { dataDir } from "../src/local/data-dir.js";
import { processAlive, runningService } from "../src/local/service-file.js";
import { classifyStartupError } from "../src/startup/errors.js";

let dir: string;
try {
  dir = dataDir(loadConfig().env);
} catch (e) {
  const known = classifyStartupError(e);
  if (!known) throw e;
  console.error(`stop: ${known.lines.join("; ")}`);
  process.exit(known.exitCode);
}
const svc = runningService(dir);
if (!svc) {
  console.log(`stop: no sandbox service is running from ${dir}`);
  process.exit(0);
}
process.kill(svc.pid, "SIGTERM");
// The service's own shutdown is bounded at 30 s; allow a little more.
const end = Date.now() + 40_000;
while (processAlive(svc.pid)) {
  if (Date.now() > end) {
    console.error(`stop: the service (pid ${svc.pid}) did not stop within 40 s`);
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, 100));
}
console.log(`stop: the sandbox service (pid ${svc.pid}) has stopped`);
