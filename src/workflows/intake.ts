// The intake lane of the App->CRM flow (docs/workflows.md): due sync_queue intents become workflows. One
// round claims a batch, starts or joins the user's workflow for each intent and completes the queue
// row in the same transaction; src/sync-loop.ts repeats it on NOTIFY and on a fallback poll.
//
// Each intent starts a trace (the App's trigger has no context to pass): its intake span is a root
// that begins at the App's commit (sync_queue.created_at), with the trigger-to-intake hop as a child
// span, and its context is stored with the workflow so every later step is traced under it.
import { desiredContentHash, loadAppUser, loadAppUsers } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { attemptsSpent, backoffDelayMs, LANE_LEAD } from "../crm/backoff.js";
import { failureCode, safeError, sqlstate } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { isDatabaseAway, whileDatabaseAway } from "../db/while-away.js";
import { countRetry, timedClaim } from "../observability/metrics.js";
import {
  markFailed,
  type Span,
  spanContextOf,
  startSpan,
  traceparentOf,
  withSpan,
} from "../observability/tracing.js";
import { stepConcurrency } from "./step-lane.js";

interface QueueRow {
  id: string;
  task_type: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
  /** Why the intent was recorded (the payload's reason): drift_repair for a repair (sql/convergence_audit.sql). */
  reason: string | null;
  /** When the App's transaction recorded the intent (database clock). */
  created_at: Date;
  /** When this claim took it (database clock). */
  claimed_at: Date;
}

/** A repair's intent is never equal to an earlier one (desiredContentHash). */
function repairOf(row: QueueRow): string | undefined {
  return row.reason === "drift_repair" ? row.id : undefined;
}

/** Claims due intents and starts or joins the user's workflow for each. Returns rows handled. */
export async function runIntake(deps: ServiceContext): Promise<number> {
  const s = deps.settings();
  // The leases end no earlier than this: until then an intent that failed because the database was
  // away is handed back once it returns (takeIntent), rather than waiting out its lease.
  const leaseEnd = Date.now() + s.lease.ttlSec * 1000;
  const { rows } = await timedClaim("intake", () =>
    deps.pool.query<QueueRow>(
      `select id, task_type, entity_id, lease_token, attempt_count, payload_json ->> 'reason' as reason,
              created_at, now() as claimed_at
         from bitrix_sync.claim_sync_tasks($1, $2, make_interval(secs => $3))`,
      [deps.workerId, s.claim.size, s.lease.ttlSec],
    ),
  );
  if (rows.length === 0) return 0;
  // A new trace per intent, starting where the intent did, with the wait in the queue as its child.
  const spans = new Map(
    rows.map((row) => {
      const span = startSpan("bitrix_sync.intake", intakeSpanOptions(row));
      withSpan(span, () =>
        startSpan("bitrix_sync.queue.wait", { startTime: row.created_at }).end(row.claimed_at),
      );
      return [row, span] as const;
    }),
  );
  try {
    if (rows.length > 1 && (await takeBatch(deps, rows, spans))) return rows.length;
    // One by one (a single intent, or a batch the one call could not take): one user's intents in
    // the order claimed (a later one joins the workflow the earlier started); different users' at
    // once, each intent in its own transaction, so one that fails holds up no other.
    const byUser = new Map<string, QueueRow[]>();
    for (const row of rows) {
      const list = byUser.get(row.entity_id);
      if (list) list.push(row);
      else byUser.set(row.entity_id, [row]);
    }
    const users = [...byUser.values()];
    let next = 0;
    const worker = async () => {
      for (let list = users[next++]; list; list = users[next++]) {
        for (const row of list) {
          const span = spans.get(row);
          if (span) await withSpan(span, () => takeIntent(deps, row, span, leaseEnd));
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(users.length, stepConcurrency(deps)) }, worker));
    return rows.length;
  } finally {
    for (const span of spans.values()) span.end();
  }
}

/** The intake span of one intent: a new trace that begins where the intent did. */
function intakeSpanOptions(row: QueueRow) {
  return {
    root: true,
    startTime: row.created_at,
    attributes: {
      "bitrix_sync.intent.id": row.id,
      "bitrix_sync.intent.type": row.task_type,
      "bitrix_sync.queue.attempt": row.attempt_count,
    },
  };
}

/** What the span of an intent taken says: the action, the workflow, a link to an earlier trace. */
function noteTaken(
  span: Span,
  joined: { workflow_id: string | null; action: string; previous_trace_context: string | null } | undefined,
): void {
  span.setAttribute("bitrix_sync.intake.action", joined?.action ?? "none");
  if (joined?.workflow_id) span.setAttribute("bitrix_sync.workflow.id", joined.workflow_id);
  // A joined (or unchanged) workflow was traced under an earlier intent: point there.
  const earlier = spanContextOf(joined?.previous_trace_context);
  if (earlier) span.addLink({ context: earlier });
}

/**
 * The whole claimed batch in one transaction and one call (take_sync_tasks): the users read in one
 * query, every intent started or joined and completed. False when the call failed (a lease taken
 * back, a database error): nothing of it is committed, and the caller takes the intents one by one,
 * where each failure is handled on its own.
 */
async function takeBatch(
  deps: ServiceContext,
  claimed: QueueRow[],
  spans: Map<QueueRow, Span>,
): Promise<boolean> {
  // By user (claim order kept within a user): every batch locks the users' workflows in the same
  // order, so two replicas' batches never wait on each other in a cycle.
  const rows = [...claimed].sort((a, b) =>
    a.entity_id < b.entity_id ? -1 : a.entity_id > b.entity_id ? 1 : 0,
  );
  try {
    const out = await inTransaction(deps.pool, async (c) => {
      const users = await loadAppUsers(
        c,
        rows.map((r) => r.entity_id),
      );
      const { rows: taken } = await c.query<{
        task_id: string;
        workflow_id: string | null;
        action: string;
        previous_trace_context: string | null;
      }>(
        "select task_id, workflow_id, action, previous_trace_context from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
        [
          rows.map((r) => r.id),
          rows.map((r) => r.lease_token),
          rows.map((r) => r.entity_id),
          rows.map((r) => r.task_type),
          rows.map((r) => desiredContentHash(r.task_type, users.get(r.entity_id) ?? null, repairOf(r))),
          rows.map((r) => traceparentOf(spans.get(r))),
        ],
      );
      return taken;
    });
    rows.forEach((row, i) => {
      const span = spans.get(row);
      if (span) noteTaken(span, out[i]);
    });
    return true;
  } catch (e) {
    if (sqlstate(e) !== "BS001") {
      deps.log.debug({ event: "intake.batch_failed", ...safeError(e) }, "batch not taken; one by one");
    }
    return false;
  }
}

async function takeIntent(deps: ServiceContext, row: QueueRow, span: Span, leaseEnd: number): Promise<void> {
  const s = deps.settings();
  try {
    const joined = await inTransaction(deps.pool, async (c) => {
      const user = await loadAppUser(c, row.entity_id);
      const hash = desiredContentHash(row.task_type, user, repairOf(row));
      const { rows: out } = await c.query<{
        workflow_id: string | null;
        action: string;
        previous_trace_context: string | null;
      }>(
        "select workflow_id, action, previous_trace_context from bitrix_sync.start_or_join_workflow($1, $2, $3, $4, $5)",
        [row.entity_id, row.task_type, row.id, hash, traceparentOf(span)],
      );
      await c.query("select bitrix_sync.complete_sync_task($1, $2)", [row.id, row.lease_token]);
      return out[0];
    });
    noteTaken(span, joined);
  } catch (e) {
    if (sqlstate(e) === "BS001") {
      // A newer intent took the row back; it will be claimed again.
      span.setAttribute("bitrix_sync.intake.action", "superseded");
      return;
    }
    markFailed(span, safeError(e).sqlstate ?? "intake_failed");
    // app_row_security: a policy on an App table refused the read of the user (docs/security.md).
    const code = failureCode(e, "intake_failed");
    deps.log.warn(
      { event: "intake.failed", intentId: row.id, code, ...safeError(e) },
      "intent not taken; will retry",
    );
    // SQL dead-letters the intent instead when the retry would pass the horizon. A failure because
    // the database was away is handed back as soon as it returns (until the lease's end), due within
    // retry.base_ms: the intent did nothing wrong.
    const delayMs = isDatabaseAway(e)
      ? backoffDelayMs(1, s.retry)
      : backoffDelayMs(attemptsSpent(row) + LANE_LEAD, s.retry);
    const r = await whileDatabaseAway(
      () =>
        deps.pool.query<{ status: string }>(
          "select status from bitrix_sync.retry_sync_task($1, $2, $3, make_interval(secs => $4))",
          [row.id, row.lease_token, code, delayMs / 1000],
        ),
      { until: leaseEnd },
    ).catch(() => null);
    span.setAttribute("bitrix_sync.intake.action", r?.rows[0]?.status ?? "retry_failed");
    if (r?.rows[0]?.status === "retry_wait") countRetry("intake", code);
    if (r?.rows[0]?.status === "dead_letter") {
      deps.log.error(
        { event: "intake.dead_letter", intentId: row.id, code: "retry_horizon_exceeded" },
        "intent given up after the retry horizon",
      );
    }
  }
}
