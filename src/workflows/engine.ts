// The App->CRM engine (DESIGN.md flow): intake turns sync_queue intents into workflows, the stepper
// advances workflows one persisted step at a time, and the pump sends the commands of all workflows
// in Bitrix24 batches through the shared limiter. Each function does one round and returns how much
// it did; src/workflows/loop.ts repeats them on NOTIFY and on a fallback poll.
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { retryDelayMs } from "../crm/backoff.js";
import { type CommandOutcome, type CrmDeps, executeBatch } from "../crm/batch.js";
import type { CommandType } from "../crm/catalogue.js";
import { isWrite } from "../crm/catalogue.js";
import type { CitizenshipDictionary } from "../crm/contact-fields.js";
import { inTransaction } from "../db/tx.js";
import type { HealthState } from "../observability/health.js";
import type { Logger } from "../observability/logger.js";
import { batchSize, commandOutcomes } from "../observability/metrics.js";
import type { Settings } from "../settings-schema.js";
import { desiredContentHash, loadAppUser } from "./app-data.js";
import { BusinessFailure, type Hydrated, hydrate, NotReady, projectResult } from "./command-io.js";
import { Step } from "./planner.js";
import type { CommandRow, WorkflowRow } from "./types.js";

export interface EngineDeps {
  pool: pg.Pool;
  log: Logger;
  crm: CrmDeps;
  dictionary: CitizenshipDictionary;
  /** The hot settings in force (the settings cache's `get`). */
  settings: () => Settings;
  workerId: string;
  /** Heartbeat and CRM health for readiness (§14); optional in tests. */
  health?: HealthState;
}

function sqlstate(e: unknown): string | undefined {
  return typeof e === "object" && e !== null && "code" in e
    ? String((e as { code: unknown }).code)
    : undefined;
}

/** The error's SQLSTATE or class name: safe to log (messages may quote data). */
function safeError(e: unknown): { sqlstate?: string; errorName: string } {
  const s = sqlstate(e);
  return { ...(s ? { sqlstate: s } : {}), errorName: e instanceof Error ? e.name : typeof e };
}

// ---- intake ----------------------------------------------------------------------------------

interface QueueRow {
  id: string;
  task_type: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
}

/** Claims due intents and starts or joins the user's workflow for each. Returns rows handled. */
export async function runIntake(deps: EngineDeps): Promise<number> {
  const s = deps.settings();
  const { rows } = await deps.pool.query<QueueRow>(
    "select id, task_type, entity_id, lease_token, attempt_count from bitrix_sync.claim_sync_tasks($1, $2, make_interval(secs => $3))",
    [deps.workerId, s.claim.size, s.lease.ttlSec],
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

// ---- workflow steps ------------------------------------------------------------------------

/** Claims runnable workflows and runs one step of each. Returns workflows stepped. */
export async function runWorkflows(deps: EngineDeps): Promise<number> {
  const s = deps.settings();
  const { rows } = await deps.pool.query<WorkflowRow>(
    "select * from bitrix_sync.claim_workflows($1, $2, make_interval(secs => $3))",
    [deps.workerId, s.claim.size, s.lease.ttlSec],
  );
  for (const wf of rows) {
    try {
      await inTransaction(deps.pool, (c) => new Step(c, wf).run());
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

// ---- the pump --------------------------------------------------------------------------------

/** Due commands waiting (including expired leases to recover), and how long the oldest has waited (ms). */
async function backlog(pool: pg.Pool): Promise<{ due: number; oldestMs: number; adds: number }> {
  const { rows } = await pool.query<{ due: number; oldest_ms: number | null; adds: number }>(
    `select count(*)::int as due,
            count(*) filter (where command_type = 'contact.add')::int as adds,
            (extract(epoch from now() - min(greatest(created_at, next_attempt_at))) * 1000)::float8 as oldest_ms
       from bitrix_sync.crm_commands
      where ((status in ('pending', 'retry_wait') and next_attempt_at <= now())
             -- A holder that died: claim_commands recovers these (uncertain writes, retried reads).
             or (status in ('leased', 'in_flight') and locked_until < now()))
        -- claim_commands returns nothing before the cutover: no limiter permit for a claim of nothing.
        and bitrix_sync.cutover_performed()`,
  );
  return { due: rows[0]?.due ?? 0, oldestMs: rows[0]?.oldest_ms ?? 0, adds: rows[0]?.adds ?? 0 };
}

export type PumpResult = { sent: number; waitMs: number };

/**
 * One batch: waits (at most batch.max_wait_ms from the oldest due command) for the batch to fill,
 * claims up to batch.size commands, hydrates them, takes a limiter permit, commits the send marker,
 * sends one Bitrix24 batch and settles every command on its own. Returns commands sent, or how long
 * to wait before the next look when there was nothing to do.
 */
export async function runPump(deps: EngineDeps, signal?: AbortSignal): Promise<PumpResult> {
  const s = deps.settings();
  const b = await backlog(deps.pool);
  if (b.due === 0) return { sent: 0, waitMs: Number.POSITIVE_INFINITY };
  if (b.due < s.batch.size && b.oldestMs < s.batch.maxWaitMs) {
    return { sent: 0, waitMs: Math.max(1, s.batch.maxWaitMs - b.oldestMs) };
  }
  // Warm the citizenship dictionary outside any permit (a create's hydration may need it).
  if (b.adds > 0) await deps.dictionary.findByValue("").catch(() => undefined);

  // Take the permit first: while it waits for a token the batch keeps filling.
  let permit: Awaited<ReturnType<CrmDeps["limiter"]["acquire"]>>;
  try {
    const wait = AbortSignal.timeout(Math.max(1000, (s.lease.ttlSec * 1000) / 2));
    permit = await deps.crm.limiter.acquire({ signal: signal ? AbortSignal.any([signal, wait]) : wait });
  } catch {
    return { sent: 0, waitMs: 100 };
  }
  // Claimed together with each command's user (the workflow's), for hydration and the result.
  let rows: Array<CommandRow & { owner_user_id: string | null }>;
  try {
    ({ rows } = await deps.pool.query<CommandRow & { owner_user_id: string | null }>(
      `select c.*, w.user_id as owner_user_id
         from bitrix_sync.claim_commands($1, $2, make_interval(secs => $3)) c
         left join bitrix_sync.workflow_instances w on w.id = c.workflow_id`,
      [deps.workerId, s.batch.size, s.lease.ttlSec],
    ));
  } catch (e) {
    await permit.release();
    throw e;
  }
  if (rows.length === 0) {
    await permit.release();
    return { sent: 0, waitMs: 50 };
  }

  const ready: Array<{ row: CommandRow; h: Hydrated }> = [];
  for (const row of rows) {
    try {
      const r = await hydrate(deps.pool, row, row.owner_user_id, deps.dictionary);
      if (r.ok) ready.push({ row, h: r.value });
      else if (r.failure.kind === "business") await settleQuietly(deps, row, "reject", r.failure.code);
      else await settleQuietly(deps, row, "dead_letter", r.failure.code);
    } catch (e) {
      if (!(e instanceof NotReady)) {
        deps.log.warn(
          { event: "pump.hydrate_failed", commandId: row.id, ...safeError(e) },
          "command not prepared",
        );
      }
      await deps.pool
        .query("select bitrix_sync.release_command($1, $2)", [row.id, row.lease_token])
        .catch(() => undefined);
    }
  }
  if (ready.length === 0) {
    await permit.release();
    return { sent: 0, waitMs: 0 };
  }

  // The durable "send started" marker, committed before any byte leaves (§7.2, adopted guarantees).
  const batchId = randomUUID();
  let marked: Set<string>;
  try {
    const res = await deps.pool.query<{ send_commands: string }>(
      "select bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3)",
      [ready.map((r) => r.row.id), ready.map((r) => r.row.lease_token), batchId],
    );
    marked = new Set(res.rows.map((r) => String(r.send_commands)));
  } catch (e) {
    await permit.release();
    throw e;
  }
  const sending = ready.filter((r) => marked.has(String(r.row.id)));
  if (sending.length === 0) {
    await permit.release();
    return { sent: 0, waitMs: 0 };
  }
  batchSize.observe(sending.length);
  const outcomes = await executeBatch(
    deps.crm,
    sending.map((r) => r.h.cmd),
    { permit, ...(signal ? { signal } : {}) },
  );
  for (const [i, { row, h }] of sending.entries()) {
    const o = outcomes[i];
    if (o) await settle(deps, row, h, o);
  }
  return { sent: sending.length, waitMs: 0 };
}

async function settleQuietly(deps: EngineDeps, row: CommandRow, how: "reject" | "dead_letter", code: string) {
  const fn = how === "reject" ? "reject_command($1, $2, $3)" : "dead_letter_command($1, $2, $3)";
  await deps.pool.query(`select bitrix_sync.${fn}`, [row.id, row.lease_token, code]).catch((e) => {
    if (sqlstate(e) !== "BS001") throw e;
  });
}

/** Settles one command from its outcome: exactly one SQL transition per classification kind (§9). */
async function settle(deps: EngineDeps, row: CommandRow, h: Hydrated, o: CommandOutcome): Promise<void> {
  const s = deps.settings();
  const write = isWrite(row.command_type as CommandType);
  commandOutcomes.inc({
    command_type: row.command_type,
    kind: o.ok ? "ok" : o.failure.kind,
    code: o.ok ? "ok" : o.failure.code,
  });
  try {
    if (o.ok) {
      try {
        await inTransaction(deps.pool, async (c) => {
          const projection = await projectResult(c, row, o.result, h, { dictionary: deps.dictionary });
          await c.query("select bitrix_sync.complete_command($1, $2, $3)", [
            row.id,
            row.lease_token,
            JSON.stringify(projection),
          ]);
        });
      } catch (e) {
        if (e instanceof BusinessFailure) {
          await deps.pool.query("select bitrix_sync.reject_command($1, $2, $3)", [
            row.id,
            row.lease_token,
            e.code,
          ]);
          return;
        }
        throw e;
      }
      return;
    }
    const f = o.failure;
    const attemptsSpent = row.attempt_count - row.limit_hits + (f.spendsAttempt ? 1 : 0);
    switch (f.kind) {
      case "transient": {
        // retry_command dead-letters instead when the retry would pass the horizon (sql/retry.sql).
        const r = await deps.pool.query<{ status: string }>(
          "select status from bitrix_sync.retry_command($1, $2, $3, make_interval(secs => $4), $5, $6, $7)",
          [
            row.id,
            row.lease_token,
            f.code,
            retryDelayMs(Math.max(0, attemptsSpent - 1), s.retry, f.retryAfterMs) / 1000,
            f.spendsAttempt,
            f.httpStatus ?? null,
            f.bitrixError ?? null,
          ],
        );
        if (r.rows[0]?.status === "dead_letter") {
          deps.log.error(
            {
              event: "pump.dead_letter",
              commandId: row.id,
              commandType: row.command_type,
              code: "retry_horizon_exceeded",
            },
            "command given up after the retry horizon",
          );
          await alertFailed(deps, row, "retry_horizon_exceeded");
        }
        return;
      }
      case "uncertain":
        await deps.pool.query("select bitrix_sync.mark_command_uncertain($1, $2, $3)", [
          row.id,
          row.lease_token,
          f.code,
        ]);
        await alertFailed(deps, row, f.code);
        return;
      case "permanent":
        await deps.pool.query("select bitrix_sync.dead_letter_command($1, $2, $3, $4, $5)", [
          row.id,
          row.lease_token,
          f.code,
          f.httpStatus ?? null,
          f.bitrixError ?? null,
        ]);
        await alertFailed(deps, row, f.code);
        return;
      case "business":
        await deps.pool.query("select bitrix_sync.reject_command($1, $2, $3)", [
          row.id,
          row.lease_token,
          f.code,
        ]);
        await alertFailed(deps, row, f.code);
        return;
    }
  } catch (e) {
    if (sqlstate(e) === "BS001") return; // our lease ended: the new holder settles it
    deps.log.warn(
      { event: "pump.settle_failed", commandId: row.id, write, ...safeError(e) },
      "command result not recorded",
    );
    // Leave it in_flight: lease expiry turns a write into uncertain and a read into a retry.
  }
}

/**
 * An alert command that will not complete: the alert is marked failed (visible in status), or, when
 * its item was deleted in the CRM, remote_missing (§10.3). Contact commands are left to their workflow.
 */
async function alertFailed(deps: EngineDeps, row: CommandRow, code: string): Promise<void> {
  if (!row.alert_id) return;
  if (code === "not_found" && row.command_type !== "alert.add") {
    await deps.pool.query(
      "select bitrix_sync.finish_business_alert($1, 'remote_missing') where exists (select 1 from bitrix_sync.business_alerts where id = $1 and status = 'open')",
      [row.alert_id],
    );
    return;
  }
  await deps.pool.query("select bitrix_sync.mark_alert_mirror_failed($1)", [row.alert_id]);
}
