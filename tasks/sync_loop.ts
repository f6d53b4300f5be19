// graphile-worker task: runs the App->CRM sync loop (intake, workflow steps, CRM pump, alert
// mirroring) for a run budget, then re-enqueues itself, also when its process stops. The crontab
// entry restarts it within a minute if the process that ran it died.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { whileDatabaseAway } from "../src/db/while-away.js";
import { runtime } from "../src/runtime.js";
import { runSyncLoop } from "../src/sync-loop.js";
import { LoopHandover } from "../src/worker/loop-handover.js";
import { safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({ budget_ms: z.number().int().min(1000).max(600_000).optional() }).passthrough();

/** Stop starting new rounds after this long; the cron entry and the re-enqueue keep one running. */
const DEFAULT_BUDGET_MS = 55_000;
const HANDOVER_MS = 3_000;
/** How long the successor's queueing is tried again while the database is away (the crontab after). */
const SUCCESSOR_RETRY_MS = 30_000;

/** Which job runs a loop, this process's loop and its successor (src/worker/loop-handover.ts). */
const loops = new LoopHandover(HANDOVER_MS);

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("sync_loop", async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  if (!loops.starts(Date.now())) return;
  const signal = AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]);
  const budgetMs = p.budget_ms ?? DEFAULT_BUDGET_MS;
  // Hand over shortly before the budget ends, so the successor is listening before this run stops
  // (an overlap is safe: every claim is SKIP LOCKED). job_key keeps at most one waiting successor.
  const handover = setTimeout(
    () => {
      if (!signal.aborted) {
        helpers
          .addJob("sync_loop", {}, { jobKey: "sync_loop", jobKeyMode: "replace" })
          .catch(() => undefined);
      }
    },
    Math.max(0, budgetMs - HANDOVER_MS),
  );
  const done = runSyncLoop(r.services, {
    budgetMs,
    signal,
    connectionString: r.databaseUrl,
  });
  const mine = loops.start(Date.now(), budgetMs);
  try {
    await done;
  } finally {
    clearTimeout(handover);
    // Also when this process is stopping (SIGTERM: a rolling upgrade or a rollback replacing this
    // replica, docs/runbook.md): another replica takes the successor at once instead of the deployment
    // processing nothing until the cron minute (found by drill:rollback). This process's runner is
    // already shutting down when the loop ends (src/main.ts aborts, then stops the runner), so it
    // does not take the job back; with no other replica the job waits for the next start. With the
    // database away at this moment (a restart) a loop that is not stopping queues its successor once
    // the database is back, rather than leaving it to the crontab up to a minute later; a stopping
    // one tries once and does not hold up the shutdown.
    if (loops.end(mine)) {
      const queue = () => helpers.addJob("sync_loop", {}, { jobKey: "sync_loop", jobKeyMode: "replace" });
      await (signal.aborted
        ? queue()
        : whileDatabaseAway(queue, { until: Date.now() + SUCCESSOR_RETRY_MS, signal })
      ).catch(() => undefined);
    }
  }
});

export default task;
