// graphile-worker task (crontab, every minute): polls open business alerts when
// alerts.reconcile_interval_sec has passed since the last run (§10.3).
import type { Task } from "graphile-worker";
import { z } from "zod";
import { reconcileAlerts } from "../src/alerts/reconcile.js";
import { runtime } from "../src/runtime.js";
import { safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({ force: z.boolean().optional() }).passthrough();

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("reconcile_alerts", async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  const { alerts } = r.settings.get();
  await reconcileAlerts(r.services, alerts, alerts.reconcileIntervalSec, {
    force: p.force === true,
    // SIGTERM: the run stops before its next batch request and gives the cursor back.
    signal: AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]),
  });
});

export default task;
