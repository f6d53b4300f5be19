// graphile-worker task: runs the App->CRM sync loop (intake, workflow steps, CRM pump, alert
// mirroring) for a run budget, then re-enqueues itself. The crontab entry restarts it within a
// minute if the process that ran it died.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { loopSettings, runtime } from "../src/runtime.js";
import { runSyncLoop } from "../src/workflows/loop.js";

const Payload = z.object({ budget_ms: z.number().int().min(1000).max(600_000).optional() }).passthrough();

/** Stop starting new rounds after this long; the cron entry and the re-enqueue keep one running. */
const DEFAULT_BUDGET_MS = 55_000;
const HANDOVER_MS = 3_000;

/**
 * The loop running in this process, if any. graphile-worker runs a new job even when a keyed job is
 * already locked (#580), so the cron entry would start a second loop every minute; instead a job
 * that finds a loop with time left returns at once, and the hand-over job waits the last seconds
 * for it and takes over. Other processes (replicas) run their own loop; claims keep them apart.
 */
let current: { endsAt: number; done: Promise<void> } | null = null;

const task: Task = async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  while (current) {
    if (current.endsAt - Date.now() > 2 * HANDOVER_MS) return;
    await current.done;
    if (r.stopping.aborted) return;
  }
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
  const done = runSyncLoop(r.engine, {
    budgetMs,
    signal,
    connectionString: r.databaseUrl,
    ...loopSettings(r),
  });
  const mine = { endsAt: Date.now() + budgetMs, done: done.catch(() => undefined) };
  current = mine;
  try {
    await done;
  } finally {
    clearTimeout(handover);
    if (current === mine) current = null;
  }
};

export default task;
