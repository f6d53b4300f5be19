// The workflows lane of the App->CRM flow (DESIGN.md): claims runnable workflows and advances each
// by one persisted step (src/workflows/step/). A step that throws is rescheduled with backoff; SQL
// fails the workflow instead once the retry would pass the horizon.
import type { ServiceContext } from "../context.js";
import { retryDelayMs } from "../crm/backoff.js";
import { safeError, sqlstate } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { countRetry, timedClaim } from "../observability/metrics.js";
import { runStep } from "./step/dispatch.js";
import type { WorkflowRow } from "./types.js";

/** Claims runnable workflows and runs one step of each. Returns workflows stepped. */
export async function runWorkflows(deps: ServiceContext): Promise<number> {
  const s = deps.settings();
  const { rows } = await timedClaim("workflows", () =>
    deps.pool.query<WorkflowRow>(
      "select * from bitrix_sync.claim_workflows($1, $2, make_interval(secs => $3))",
      [deps.workerId, s.claim.size, s.lease.ttlSec],
    ),
  );
  for (const wf of rows) {
    try {
      await inTransaction(deps.pool, (c) => runStep(c, wf));
    } catch (e) {
      if (sqlstate(e) === "BS001") continue; // lease lost: the new holder carries on
      deps.log.warn(
        {
          event: "workflow.step_failed",
          workflowId: wf.id,
          workflowType: wf.workflow_type,
          step: wf.current_step,
          ...safeError(e),
        },
        "workflow step failed; scheduled for retry",
      );
      const r = await deps.pool
        .query<{ state: string }>(
          "select state from bitrix_sync.schedule_workflow_retry($1, $2, 'step_failed', make_interval(secs => $3))",
          [wf.id, wf.lease_token, retryDelayMs(wf.attempt_count, s.retry) / 1000],
        )
        .catch(() => null);
      if (r?.rows[0]?.state === "waiting_retry") countRetry("workflows", "step_failed");
      if (r?.rows[0]?.state === "failed") {
        deps.log.error(
          { event: "workflow.dead_letter", workflowId: wf.id, code: "retry_horizon_exceeded" },
          "workflow failed after the retry horizon",
        );
      }
    }
  }
  return rows.length;
}
