// The intake lane of the App->CRM flow (DESIGN.md): due sync_queue intents become workflows. One
// round claims a batch, starts or joins the user's workflow for each intent and completes the queue
// row in the same transaction; src/sync-loop.ts repeats it on NOTIFY and on a fallback poll.
//
// Each intent starts a trace (the App's trigger has no context to pass): its intake span is a root
// that begins at the App's commit (sync_queue.created_at), with the trigger-to-intake hop as a child
// span, and its context is stored with the workflow so every later step is traced under it.
import { desiredContentHash, loadAppUser } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { retryDelayMs } from "../crm/backoff.js";
import { safeError, sqlstate } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { countRetry, timedClaim } from "../observability/metrics.js";
import {
  inSpan,
  markFailed,
  type Span,
  spanContextOf,
  startSpan,
  traceparentOf,
} from "../observability/tracing.js";
import { stepConcurrency } from "./stepper.js";

interface QueueRow {
  id: string;
  task_type: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
  /** When the App's transaction recorded the intent (database clock). */
  created_at: Date;
  /** When this claim took it (database clock). */
  claimed_at: Date;
}

/** Claims due intents and starts or joins the user's workflow for each. Returns rows handled. */
export async function runIntake(deps: ServiceContext): Promise<number> {
  const s = deps.settings();
  const { rows } = await timedClaim("intake", () =>
    deps.pool.query<QueueRow>(
      `select id, task_type, entity_id, lease_token, attempt_count, created_at, now() as claimed_at
         from bitrix_sync.claim_sync_tasks($1, $2, make_interval(secs => $3))`,
      [deps.workerId, s.claim.size, s.lease.ttlSec],
    ),
  );
  // One user's intents in the order claimed (a later one joins the workflow the earlier started);
  // different users' at once, each intent in its own transaction.
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
        await inSpan(
          "bitrix_sync.intake",
          {
            // A new trace per intent, starting where the intent did.
            root: true,
            startTime: row.created_at,
            attributes: {
              "bitrix_sync.intent.id": row.id,
              "bitrix_sync.intent.type": row.task_type,
              "bitrix_sync.queue.attempt": row.attempt_count,
            },
          },
          (span) => {
            startSpan("bitrix_sync.queue.wait", { startTime: row.created_at }).end(row.claimed_at);
            return takeIntent(deps, row, span);
          },
        );
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(users.length, stepConcurrency(deps)) }, worker));
  return rows.length;
}

async function takeIntent(deps: ServiceContext, row: QueueRow, span: Span): Promise<void> {
  const s = deps.settings();
  try {
    const joined = await inTransaction(deps.pool, async (c) => {
      const user = await loadAppUser(c, row.entity_id);
      const hash = desiredContentHash(row.task_type, user);
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
    span.setAttribute("bitrix_sync.intake.action", joined?.action ?? "none");
    if (joined?.workflow_id) span.setAttribute("bitrix_sync.workflow.id", joined.workflow_id);
    // A joined (or unchanged) workflow was traced under an earlier intent: point there.
    const earlier = spanContextOf(joined?.previous_trace_context);
    if (earlier) span.addLink({ context: earlier });
  } catch (e) {
    if (sqlstate(e) === "BS001") {
      // A newer intent took the row back; it will be claimed again.
      span.setAttribute("bitrix_sync.intake.action", "superseded");
      return;
    }
    markFailed(span, safeError(e).sqlstate ?? "intake_failed");
    deps.log.warn(
      { event: "intake.failed", intentId: row.id, ...safeError(e) },
      "intent not taken; will retry",
    );
    // SQL dead-letters the intent instead when the retry would pass the horizon.
    const r = await deps.pool
      .query<{ status: string }>(
        "select status from bitrix_sync.retry_sync_task($1, $2, 'intake_failed', make_interval(secs => $3))",
        [row.id, row.lease_token, retryDelayMs(row.attempt_count, s.retry) / 1000],
      )
      .catch(() => null);
    span.setAttribute("bitrix_sync.intake.action", r?.rows[0]?.status ?? "retry_failed");
    if (r?.rows[0]?.status === "retry_wait") countRetry("intake", "intake_failed");
    if (r?.rows[0]?.status === "dead_letter") {
      deps.log.error(
        { event: "intake.dead_letter", intentId: row.id, code: "retry_horizon_exceeded" },
        "intent given up after the retry horizon",
      );
    }
  }
}
