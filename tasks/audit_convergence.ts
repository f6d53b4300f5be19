// graphile-worker task (crontab, every minute): the convergence audit (src/audit/run.ts), run when
// audit.interval_sec has passed since the last run and audit.enabled. Payload `{"all": true}`
// compares every active link now (after a restore or an incident): an admin queues it with
// `select bitrix_sync.request_convergence_audit('ops:<you>', '<why>')`, a role with rights on
// graphile_worker with `select graphile_worker.add_job('audit_convergence', '{"all": true}')`.
// `{"force": true}` runs a sampled run now.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { runConvergenceAudit } from "../src/audit/run.js";
import { runtime } from "../src/runtime.js";
import { failTask, safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({ all: z.boolean().optional(), force: z.boolean().optional() }).passthrough();

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("audit_convergence", async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  const report = await runConvergenceAudit(r.services, r.settings.get(), {
    all: p.all === true,
    force: p.force === true,
    // SIGTERM: the run stops before its next request; what it judged is kept.
    signal: AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]),
  });
  // graphile-worker retries the job (with backoff) until the full run gets the audit.
  if (report.status === "busy") throw failTask("audit_convergence", "audit_busy");
  if (report.status === "failed") throw failTask("audit_convergence", report.errorCode ?? "run_failed");
});

export default task;
