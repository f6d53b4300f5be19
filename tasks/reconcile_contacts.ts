// graphile-worker task (crontab, every minute): runs the incremental Contact reconciliation when
// reconcile.contacts_interval_sec has passed since the last run (§10.2), or, after a failed run, when
// its backoff has: the failed run is then scheduled again for that moment. Payload `{force: true}`
// runs it now (operators: graphile_worker.add_job('reconcile_contacts', '{"force":true}')).
import type { Task } from "graphile-worker";
import { z } from "zod";
import { reconcileContacts } from "../src/inbound/reconcile.js";
import { runtime } from "../src/runtime.js";
import { failTask, safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({ force: z.boolean().optional() }).passthrough();

/** The job that runs a failed reconciliation again at its retry time (one at a time). */
const RETRY_JOB_KEY = "reconcile_contacts:retry";

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("reconcile_contacts", async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  const report = await reconcileContacts(r.services, r.settings.get().reconcile, {
    force: p.force === true,
    // SIGTERM: the run stops before its next batch and gives the cursor back.
    signal: AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]),
  });
  if (report.status !== "failed") return;
  if (report.retryAt) {
    // Not forced: the claim decides again whether the run is due (another may have run meanwhile).
    await helpers.addJob(
      "reconcile_contacts",
      {},
      { runAt: report.retryAt, jobKey: RETRY_JOB_KEY, jobKeyMode: "replace", maxAttempts: 1 },
    );
  }
  throw failTask("reconcile_contacts", report.errorCode ?? "run_failed");
});

export default task;
