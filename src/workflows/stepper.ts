// The workflows lane of the App->CRM flow (DESIGN.md): claims runnable workflows and advances each
// by one persisted step (src/workflows/step/). A step that throws is rescheduled with backoff; SQL
// fails the workflow instead once the retry would pass the horizon. Each step is a span under the
// context stored with the workflow (its intent's intake span), whichever process runs it.
import type { ServiceContext } from "../context.js";
import { retryDelayMs } from "../crm/backoff.js";
import { safeError, sqlstate } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { countRetry, timedClaim } from "../observability/metrics.js";
import { inSpan, markFailed, type Span, storedParent } from "../observability/tracing.js";
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
  // Steps of different workflows are independent (each holds its own lease and runs in its own
  // transaction): several run at once, so the round's time is not the sum of its round trips. The
  // pool keeps connections for the other lanes.
  let next = 0;
  const worker = async () => {
    for (let wf = rows[next++]; wf; wf = rows[next++]) {
      const w = wf;
      await inSpan(
        "bitrix_sync.workflow.step",
        {
          parent: storedParent(w.trace_context),
          attributes: {
            "bitrix_sync.workflow.id": w.id,
            "bitrix_sync.workflow.type": w.workflow_type,
            "bitrix_sync.workflow.intent": w.intent_type,
            "bitrix_sync.workflow.step": w.current_step,
            "bitrix_sync.workflow.attempt": w.attempt_count,
            "bitrix_sync.correlation.id": w.correlation_id,
          },
        },
        (span) => step(deps, w, span),
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(rows.length, stepConcurrency(deps)) }, worker));
  return rows.length;
}

/** Steps run at once: half the pool (at least 1, at most 8), the rest is for the other lanes. */
export function stepConcurrency(deps: Pick<ServiceContext, "pool">): number {
  const max = (deps.pool as { options?: { max?: number } }).options?.max ?? 10;
  return Math.max(1, Math.min(8, Math.floor(max / 2)));
}

async function step(deps: ServiceContext, wf: WorkflowRow, span: Span): Promise<void> {
  const s = deps.settings();
  try {
    const r = await inTransaction(deps.pool, (c) => runStep(c, wf));
    span.setAttribute("bitrix_sync.workflow.event", r.event);
    if (r.commandType) span.setAttribute("bitrix_sync.command.type", r.commandType);
    if (r.outcome) span.setAttribute("bitrix_sync.outcome", r.outcome);
    if (r.code) span.setAttribute("bitrix_sync.error.code", r.code);
    deps.log.debug(
      {
        event: "workflow.step",
        workflowId: wf.id,
        correlationId: wf.correlation_id,
        workflowType: wf.workflow_type,
        step: wf.current_step,
        workflowEvent: r.event,
        commandType: r.commandType,
        outcome: r.outcome,
        code: r.code,
      },
      "workflow step done",
    );
  } catch (e) {
    if (sqlstate(e) === "BS001") {
      span.setAttribute("bitrix_sync.workflow.event", "lease_lost"); // the new holder carries on
      return;
    }
    markFailed(span, safeError(e).sqlstate ?? safeError(e).errorName);
    const ids = { workflowId: wf.id, correlationId: wf.correlation_id };
    deps.log.warn(
      {
        event: "workflow.step_failed",
        ...ids,
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
    span.setAttribute("bitrix_sync.workflow.event", r?.rows[0]?.state === "failed" ? "fail" : "retry");
    if (r?.rows[0]?.state === "waiting_retry") countRetry("workflows", "step_failed");
    if (r?.rows[0]?.state === "failed") {
      deps.log.error(
        { event: "workflow.dead_letter", ...ids, code: "retry_horizon_exceeded" },
        "workflow failed after the retry horizon",
      );
    }
  }
}
