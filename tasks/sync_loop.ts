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

const task: Task = async (payload, helpers) => {
  const p = Payload.parse(payload ?? {});
  const r = await runtime();
  if (!r.config.processing || r.stopping.aborted) return;
  const signal = AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]);
  await runSyncLoop(r.engine, {
    budgetMs: p.budget_ms ?? DEFAULT_BUDGET_MS,
    signal,
    connectionString: r.databaseUrl,
    ...loopSettings(r),
  });
  if (!signal.aborted) {
    // Hand over to a fresh job at once; job_key keeps at most one waiting successor.
    await helpers.addJob("sync_loop", {}, { jobKey: "sync_loop", jobKeyMode: "replace" });
  }
};

export default task;
