// The intake lane of the App->CRM flow (DESIGN.md): due sync_queue intents become workflows. One
// round claims a batch, starts or joins the user's workflow for each intent and completes the queue
// row in the same transaction; src/sync-loop.ts repeats it on NOTIFY and on a fallback poll.

import { desiredContentHash, loadAppUser } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { retryDelayMs } from "../crm/backoff.js";
import { safeError, sqlstate } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { countRetry, timedClaim } from "../observability/metrics.js";

interface QueueRow {
  id: string;
  task_type: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
}

/** Claims due intents and starts or joins the user's workflow for each. Returns rows handled. */
export async function runIntake(deps: ServiceContext): Promise<number> {
  const s = deps.settings();
  const { rows } = await timedClaim("intake", () =>
    deps.pool.query<QueueRow>(
      "select id, task_type, entity_id, lease_token, attempt_count from bitrix_sync.claim_sync_tasks($1, $2, make_interval(secs => $3))",
      [deps.workerId, s.claim.size, s.lease.ttlSec],
    ),
  );
  for (const row of rows) {
    try {
      await inTransaction(deps.pool, async (c) => {
        const user = await loadAppUser(c, row.entity_id);
        const hash = desiredContentHash(row.task_type, user);
        await c.query("select * from bitrix_sync.start_or_join_workflow($1, $2, $3, $4)", [
          row.entity_id,
          row.task_type,
          row.id,
          hash,
        ]);
        await c.query("select bitrix_sync.complete_sync_task($1, $2)", [row.id, row.lease_token]);
      });
    } catch (e) {
      if (sqlstate(e) === "BS001") continue; // a newer intent took the row back; it will be claimed again
      deps.log.warn({ event: "intake.failed", ...safeError(e) }, "intent not taken; will retry");
      // SQL dead-letters the intent instead when the retry would pass the horizon.
      const r = await deps.pool
        .query<{ status: string }>(
          "select status from bitrix_sync.retry_sync_task($1, $2, 'intake_failed', make_interval(secs => $3))",
          [row.id, row.lease_token, retryDelayMs(row.attempt_count, s.retry) / 1000],
        )
        .catch(() => null);
      if (r?.rows[0]?.status === "retry_wait") countRetry("intake", "intake_failed");
      if (r?.rows[0]?.status === "dead_letter") {
        deps.log.error(
          { event: "intake.dead_letter", code: "retry_horizon_exceeded" },
          "intent given up after the retry horizon",
        );
      }
    }
  }
  return rows.length;
}
