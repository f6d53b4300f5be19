// graphile-worker task: runs the App->CRM sync loop (intake, workflow steps, CRM pump, alert
// mirroring) for a run budget, then re-enqueues itself. The crontab entry restarts it within a
// minute if the process that ran it died.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { runtime } from "../src/runtime.js";
import { runSyncLoop } from "../src/sync-loop.js";
import { safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({ budget_ms: z.number().int().min(1000).max(600_000).optional() }).passthrough();

/** Stop starting new rounds after this long; the cron entry and the re-enqueue keep one running. */
const DEFAULT_BUDGET_MS = 55_000;
const HANDOVER_MS = 3_000;

/**
 * The loop running in this process and, during a hand-over, its successor. graphile-worker runs a
 * new job even when a keyed job is already locked (#580), so the cron entry would start another
 * loop every minute; instead a job that finds a loop with time left returns at once. In the last
 * seconds of a loop's budget one successor starts right away, so there is no gap at the hand-over
 * (two loops overlap briefly, which claims make safe), and a third job returns.
 */
interface Run {
  endsAt: number;
}
let current: Run | null = null;
let successor: Run | null = null;

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("sync_loop", async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  if (current && (successor || current.endsAt - Date.now() > 2 * HANDOVER_MS)) return;
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
  const mine: Run = { endsAt: Date.now() + budgetMs };
  if (current) successor = mine;
  else current = mine;
  try {
    await done;
  } finally {
    clearTimeout(handover);
    if (current === mine) {
      current = successor;
      successor = null;
    } else if (successor === mine) {
      successor = null;
    }
    // The hand-over job can be taken by a job that returned at once because this loop (or its
    // successor) still had time; if nothing runs after this loop now, enqueue the successor here,
    // or the next loop would wait for the cron minute.
    if (current === null && !signal.aborted) {
      await helpers
        .addJob("sync_loop", {}, { jobKey: "sync_loop", jobKeyMode: "replace" })
        .catch(() => undefined);
    }
  }
});

export default task;
