// graphile-worker task (crontab, every minute): polls open business alerts when
// alerts.reconcile_interval_sec has passed since the last run (§10.3), or, after a failed run, when
// its backoff has: the failed run is then scheduled again for that moment.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { reconcileAlerts } from "../src/alerts/reconcile.js";
import { runtime } from "../src/runtime.js";
import { failTask, safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({ force: z.boolean().optional() }).passthrough();

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("reconcile_alerts", async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  const { alerts } = r.settings.get();
  const report = await reconcileAlerts(r.services, alerts, alerts.reconcileIntervalSec, {
    force: p.force === true,
    // SIGTERM: the run stops before its next batch request and gives the cursor back.
    signal: AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]),
  });
  if (report.errorCode === undefined) return;
  if (report.retryAt) {
    // Not forced: the claim decides again whether the run is due (another may have run meanwhile).
    await helpers.addJob(
      "reconcile_alerts",
      {},
      { runAt: report.retryAt, jobKey: "reconcile_alerts:retry", jobKeyMode: "replace", maxAttempts: 1 },
    );
  }
  throw failTask("reconcile_alerts", report.errorCode);
});

export default task;
