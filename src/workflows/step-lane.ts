// The workflows lane of the App->CRM flow (docs/workflows.md): claims runnable workflows and advances each
// by one persisted step (src/workflows/step/). A step that throws is rescheduled with backoff; SQL
// fails the workflow instead once the retry would pass the horizon. Each step is a span under the
// context stored with the workflow (its intent's intake span), whichever process runs it.
import type pg from "pg";
import type { ServiceContext } from "../context.js";
import { attemptsSpent, backoffDelayMs, LANE_LEAD } from "../crm/backoff.js";
import { failureCode, safeError, sqlstate } from "../db/errors.js";
import { StatementBatcher } from "../db/statement-batcher.js";
import { inTransaction } from "../db/tx.js";
import { isDatabaseAway, whileDatabaseAway } from "../db/while-away.js";
import { countRetry, stepGroups, timedClaim } from "../observability/metrics.js";
import { inSpan, markFailed, type Span, storedParent } from "../observability/tracing.js";
import type { StepResult } from "./step/core.js";
import { runStep } from "./step/dispatch.js";
import type { WorkflowRow } from "./types.js";

/** Claims runnable workflows and runs one step of each. Returns workflows stepped. */
export async function runWorkflows(deps: ServiceContext): Promise<number> {
  const s = deps.settings();
  // The leases end no earlier than this: until then a step that failed because the database was
  // away is handed back once it returns (stepFailed), rather than waiting out its lease.
  const leaseEnd = Date.now() + s.lease.ttlSec * 1000;
  const { rows } = await timedClaim("workflows", () =>
    deps.pool.query<WorkflowRow>(
      "select * from bitrix_sync.claim_workflows($1, $2, make_interval(secs => $3))",
      [deps.workerId, s.claim.size, s.lease.ttlSec],
    ),
  );
  // The claimed workflows are stepped in a few groups at once, each group in one transaction whose
  // identical statements go to the server as one (src/db/statement-batcher.ts). Groups use at most
  // half the pool: the rest is for the other lanes.
  const groups = Math.min(stepConcurrency(deps), Math.ceil(rows.length / GROUP_TARGET));
  const parts: WorkflowRow[][] = Array.from({ length: groups }, () => []);
  for (const [i, wf] of rows.entries()) parts[i % groups]?.push(wf);
  // A group locks its workflow rows in this order (step_context, one grouped call): by user, as
  // intake's batches do (take_sync_tasks), so the two never wait for each other in a cycle.
  for (const part of parts) part.sort((a, b) => (a.user_id < b.user_id ? -1 : a.user_id > b.user_id ? 1 : 0));
  await Promise.all(parts.map((part) => stepGroup(deps, part, leaseEnd)));
  return rows.length;
}

/** Workflows per group, when the claim has enough of them to fill the groups. */
const GROUP_TARGET = 12;

function stepSpan(w: WorkflowRow, fn: (span: Span) => Promise<void>): Promise<void> {
  return inSpan(
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
    fn,
  );
}

/**
 * Steps `rows` in one transaction. Each step still decides alone, with its own span, under its own
 * lease and fences; only the statements travel together. If anything fails (a statement, a step,
 * the commit), the transaction is rolled back and each step runs again alone, one after the other,
 * in a transaction of its own, exactly as a single step does: a step that failed there fails again
 * on its own, and the others are not held back by it.
 */
async function stepGroup(deps: ServiceContext, rows: WorkflowRow[], leaseEnd: number): Promise<void> {
  if (rows.length === 1) {
    const wf = rows[0] as WorkflowRow;
    return await stepSpan(wf, (span) => step(deps, wf, span, leaseEnd));
  }
  // The steps change their rows as they go; a step run again alone starts from the claimed row.
  const claimed = rows.map((wf) => structuredClone(wf));
  let committed!: (ok: boolean) => void;
  const outcome = new Promise<boolean>((r) => {
    committed = r;
  });
  // Run again alone one after the other, so a failed group takes one connection, not one per step.
  let alone: Promise<void> = Promise.resolve();
  const runAlone = (i: number, span: Span): Promise<void> => {
    const run = alone.then(() => step(deps, claimed[i] as WorkflowRow, span, leaseEnd));
    alone = run.catch(() => undefined);
    return run;
  };

  let conn: pg.PoolClient;
  try {
    conn = await deps.pool.connect();
  } catch {
    committed(false);
    await Promise.all(rows.map((wf, i) => stepSpan(wf, (span) => runAlone(i, span))));
    return;
  }
  const batcher = new StatementBatcher(conn);
  let begun = false;
  try {
    await conn.query("begin");
    begun = true;
  } catch (e) {
    batcher.fail(e);
  }
  let pending = rows.length;
  let allDecided!: () => void;
  const decided = new Promise<void>((r) => {
    allDecided = r;
  });
  const runs = rows.map((wf, i) =>
    stepSpan(wf, async (span) => {
      let r: StepResult | null = null;
      try {
        if (!batcher.failure) r = await runStep(batcher.client(), wf, deps.settings().retry);
      } catch (e) {
        batcher.fail(e);
      }
      if (--pending === 0) allDecided();
      if (r && (await outcome)) return report(deps, wf, span, r);
      await runAlone(i, span);
    }),
  );
  await decided;
  let ok = false;
  let broken = false;
  if (begun && !batcher.failure) {
    try {
      await conn.query("commit");
      ok = true;
    } catch {
      ok = false;
    }
  }
  if (begun && !ok) {
    broken = !(await conn.query("rollback").then(
      () => true,
      () => false,
    ));
  }
  conn.release(broken || !begun || undefined);
  stepGroups.inc({ outcome: ok ? "committed" : "alone" });
  if (!ok)
    deps.log.debug({ event: "workflow.group_retried", workflows: rows.length }, "workflow group ran alone");
  committed(ok);
  await Promise.all(runs);
}

/** Step groups run at once: half the pool (at least 1, at most 8), the rest is for the other lanes. */
export function stepConcurrency(deps: Pick<ServiceContext, "pool">): number {
  const max = (deps.pool as { options?: { max?: number } }).options?.max ?? 10;
  return Math.max(1, Math.min(8, Math.floor(max / 2)));
}

async function step(deps: ServiceContext, wf: WorkflowRow, span: Span, leaseEnd: number): Promise<void> {
  try {
    const r = await inTransaction(deps.pool, (c) => runStep(c, wf, deps.settings().retry));
    report(deps, wf, span, r);
  } catch (e) {
    await stepFailed(deps, wf, span, e, leaseEnd);
  }
}

/** A committed step: its span's attributes and its debug line. */
function report(deps: ServiceContext, wf: WorkflowRow, span: Span, r: StepResult): void {
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
}

/**
 * A step that threw is rescheduled with backoff. One that failed because the database was away (a
 * restart, a failover) says nothing about the step: it is handed back as soon as the database takes
 * it again (tried until the lease's end) and comes back within retry.base_ms, without the backoff of
 * the workflow's attempts (a claim per step, so a long workflow's backoff runs into minutes).
 */
async function stepFailed(
  deps: ServiceContext,
  wf: WorkflowRow,
  span: Span,
  e: unknown,
  leaseEnd: number,
): Promise<void> {
  const s = deps.settings();
  if (sqlstate(e) === "BS001") {
    span.setAttribute("bitrix_sync.workflow.event", "lease_lost"); // the new holder carries on
    return;
  }
  markFailed(span, safeError(e).sqlstate ?? safeError(e).errorName);
  const ids = { workflowId: wf.id, correlationId: wf.correlation_id };
  // A row-security policy on an App table refuses the step's read (app_row_security): retried like
  // any failure, but named, so the log and the workflow say why (docs/security.md).
  const code = failureCode(e, "step_failed");
  deps.log.warn(
    {
      event: "workflow.step_failed",
      ...ids,
      workflowType: wf.workflow_type,
      step: wf.current_step,
      code,
      ...safeError(e),
    },
    "workflow step failed; scheduled for retry",
  );
  const away = isDatabaseAway(e);
  const delayMs = away ? backoffDelayMs(1, s.retry) : backoffDelayMs(attemptsSpent(wf) + LANE_LEAD, s.retry);
  const r = await whileDatabaseAway(
    () =>
      deps.pool.query<{ state: string }>(
        "select state from bitrix_sync.schedule_workflow_retry($1, $2, $3, make_interval(secs => $4))",
        [wf.id, wf.lease_token, code, delayMs / 1000],
      ),
    { until: leaseEnd },
  ).catch(() => null);
  span.setAttribute("bitrix_sync.workflow.event", r?.rows[0]?.state === "failed" ? "fail" : "retry");
  if (r?.rows[0]?.state === "waiting_retry") countRetry("workflows", code);
  if (r?.rows[0]?.state === "failed") {
    deps.log.error(
      { event: "workflow.dead_letter", ...ids, code: "retry_horizon_exceeded" },
      "workflow failed after the retry horizon",
    );
  }
}
