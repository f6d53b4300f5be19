// graphile-worker task (crontab, hourly): deletes finished rows past their retention.*_days in
// small batches (src/maintenance/retention.ts). An admin can queue a run now with
// graphile_worker.add_job('retention', '{}') or call bitrix_sync.delete_retention_batch() in psql.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { runRetention } from "../src/maintenance/retention.js";
import { runtime } from "../src/runtime.js";
import { safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({}).passthrough();

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("retention", async (payload, helpers) => {
  Payload.parse(payload ?? {});
  const r = await runtime();
  // A paused service (BITRIX_SYNC_ENABLED=false, §17 rollback) keeps its history as it is.
  if (!r.config.processing || r.stopping.aborted) return;
  const signal = AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]);
  await runRetention(r.pool, r.settings.get().retention, r.log, { signal });
});

export default task;
