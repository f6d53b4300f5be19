// graphile-worker task (crontab, hourly): re-keys the snapshots' phone hashes still in a legacy form
// (src/maintenance/rekey.ts). Once none is left, a run is one query that finds nothing.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { rekeyLegacyHashes } from "../src/maintenance/rekey.js";
import { runtime } from "../src/runtime.js";
import { safeTask } from "../src/worker/task-errors.js";

const Payload = z.object({}).passthrough();

// Wrapped: whatever it throws reaches the runner as a code, never data (src/worker/task-errors.ts).
const task: Task = safeTask("rekey_hashes", async (payload, helpers) => {
  Payload.parse(payload ?? {});
  const r = await runtime();
  // A paused service (BITRIX_SYNC_ENABLED=false) may run without the hash key.
  if (!r.config.processing || r.stopping.aborted) return;
  const signal = AbortSignal.any([r.stopping, helpers.abortSignal ?? new AbortController().signal]);
  await rekeyLegacyHashes(r.pool, r.log, { signal });
});

export default task;
