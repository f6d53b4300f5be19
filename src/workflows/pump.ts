// The pump lane (docs/workflows.md; docs/decisions.md, 2): sends the commands of all workflows, and the alert commands of
// src/alerts/mirror.ts, in Bitrix24 batches through the shared limiter, and settles each result
// with exactly one SQL transition (successes that are only projected: one statement for the
// batch). src/sync-loop.ts starts batches and keeps up to limiter.max_in_flight of them in flight.
// This file is the batch flow; the portal watch is ./pump-portal.ts, the settling ./pump-settle.ts.
import { randomUUID } from "node:crypto";
import { setTimeout as delay } from "node:timers/promises";
import type { Attributes } from "@opentelemetry/api";
import type pg from "pg";
import { type AppUser, loadAppUsers } from "../app-data.js";
import type { ServiceContext } from "../context.js";
import { type CommandOutcome, type CrmDeps, executeBatch } from "../crm/batch.js";
import type { LimiterPermit } from "../crm/limiter.js";
import { safeError, sqlstate } from "../db/errors.js";
import { whileDatabaseAway } from "../db/while-away.js";
import { timedClaim } from "../observability/metrics.js";
import {
  linksTo,
  markFailed,
  type Span,
  safeErrorCode,
  startSpan,
  storedParent,
  withSpan,
} from "../observability/tracing.js";
import { type Hydrated, hydrate, NotReady, projectionOnly } from "./command-payloads.js";
import { PROCESS_STARTED_AT } from "./process-start.js";
import { bringForward, notePortal, PROBE_INTERVAL_MS, watchOf } from "./pump-portal.js";
import { commandIds, completeTogether, logSettled, settle, settleQuietly } from "./pump-settle.js";
import type { CommandRow } from "./types.js";

/** Due commands waiting (including expired leases to recover), and how long the oldest has waited (ms). */
async function backlog(pool: pg.Pool): Promise<{ due: number; oldestMs: number; adds: number }> {
  const { rows } = await pool.query<{ due: number; oldest_ms: number | null; adds: number }>(
    "select due, adds, oldest_ms from bitrix_sync.due_commands()",
  );
  return { due: rows[0]?.due ?? 0, oldestMs: rows[0]?.oldest_ms ?? 0, adds: rows[0]?.adds ?? 0 };
}

/** How often a batch holding its token looks whether it is full before its max wait ends. */
const FILL_POLL_MS = 50;

/**
 * A marked command's request leaves within this long of its send marker, or not at all (executeBatch's
 * leaveBy). With the client's deadline it makes the reply deadline recorded with the marker
 * (crm_commands.reply_deadline_at): by then the request is out and given up by the client, whatever
 * becomes of its holder, and the late-write wait of an unanswered write counts from there
 * (src/workflows/decide/unanswered-write.ts). A batch leaves milliseconds after its marker; the
 * window covers a slow database read on the way and a direct call's wait for its permit.
 */
export const SEND_WINDOW_MS = 2_000;

export type PumpResult = { sent: number; waitMs: number };

/** A batch whose send marker is committed: `flight` sends it and settles every command. */
export type PumpStart = PumpResult & { flight?: Promise<void> };

/**
 * One batch: takes one limiter permit, waits for the batch to fill (at most batch.max_wait_ms from
 * the oldest due command, counting the wait for the permit), claims up to batch.size commands,
 * hydrates them and commits the send marker. The returned `flight` sends the Bitrix24 batch and settles every command; the caller may
 * start the next batch meanwhile (src/sync-loop.ts keeps up to limiter.max_in_flight in flight).
 * Without a batch, says how long to wait before the next look.
 */
export async function startPump(deps: ServiceContext, signal?: AbortSignal): Promise<PumpStart> {
  const s = deps.settings();
  const watch = watchOf(deps);
  let b = await backlog(deps.pool);
  if (b.due === 0 && watch.down && Date.now() - watch.lastProbeAt >= PROBE_INTERVAL_MS) {
    // The portal failed last time and nothing is due: one waiting retry goes as a probe.
    watch.lastProbeAt = Date.now();
    if ((await bringForward(deps, 1)) > 0) b = await backlog(deps.pool);
  }
  if (b.due === 0) {
    return { sent: 0, waitMs: watch.down ? PROBE_INTERVAL_MS : Number.POSITIVE_INFINITY };
  }
  // Warm the citizenship dictionary outside any permit (a create's hydration may need it).
  if (b.adds > 0) await deps.dictionary.findByValue("").catch(() => undefined);

  // Take the permit first: while it waits for a token the batch keeps filling. The fill wait
  // (batch.max_wait_ms from the oldest due command) runs alongside the wait for the token rather
  // than before it: when the bucket makes the batch wait anyway, it does not also wait to fill.
  let permit: Awaited<ReturnType<CrmDeps["limiter"]["acquire"]>>;
  try {
    const wait = AbortSignal.timeout(Math.max(1000, (s.lease.ttlSec * 1000) / 2));
    permit = await deps.crm.limiter.acquire({ signal: signal ? AbortSignal.any([signal, wait]) : wait });
  } catch {
    return { sent: 0, waitMs: 100 };
  }
  if (b.due < s.batch.size && b.oldestMs < s.batch.maxWaitMs) {
    try {
      await waitToFill(deps, s, b.oldestMs, signal);
    } catch (e) {
      await permit.release();
      throw e;
    }
  }
  // The lease ends no earlier than claimedAt + lease.ttl_sec: until then (settleBy) a transition
  // that fails because the database is away is tried again (src/db/while-away.ts).
  const claimedAt = Date.now();
  const settleBy = claimedAt + s.lease.ttlSec * 1000;
  let claimed: Awaited<ReturnType<typeof claimBatch>>;
  try {
    claimed = await claimBatch(deps, s);
  } catch (e) {
    await permit.release();
    throw e;
  }
  if (claimed.rows.length === 0) {
    await permit.release();
    return { sent: 0, waitMs: 50 };
  }
  const ready = await hydrateAll(deps, claimed.rows, claimed.users, settleBy);
  if (ready.length === 0) {
    await permit.release();
    return { sent: 0, waitMs: 0 };
  }
  if (signal?.aborted) {
    // SIGTERM after the claim: nothing has left, so the commands go back unsent (release_command,
    // no attempt spent) for another replica, rather than waiting out their lease.
    await permit.release();
    for (const { row } of ready) await release(deps, row, settleBy);
    return { sent: 0, waitMs: 0 };
  }

  // The durable "send started" marker, committed before any byte leaves (§7.2, adopted guarantees),
  // with the moment the reply is given up at the latest: the send window and the client's deadline
  // (null when the client's deadline is not known here: the unanswered time then counts to the
  // moment the command became uncertain). The window is counted from before the marker's statement,
  // so it ends no later than the marker's own time plus SEND_WINDOW_MS, whatever the clocks say.
  const batchId = randomUUID();
  const markedAt = Date.now();
  const replyWithinSec =
    deps.crm.timeoutMs === undefined ? null : (SEND_WINDOW_MS + deps.crm.timeoutMs) / 1000;
  let marked: Set<string>;
  try {
    const res = await deps.pool.query<{ send_commands: string }>(
      "select bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3, make_interval(secs => $4))",
      [ready.map((r) => r.row.id), ready.map((r) => r.row.lease_token), batchId, replyWithinSec],
    );
    marked = new Set(res.rows.map((r) => String(r.send_commands)));
  } catch (e) {
    await permit.release();
    // Nothing has left: the commands go back unsent once the database takes it, rather than
    // waiting out their lease (and, marked by a commit whose answer was lost, a late-write wait).
    for (const { row } of ready) await unsent(deps, row, settleBy);
    throw e;
  }
  await holdUnproven(deps, ready, marked, settleBy);
  const sending = ready.filter((r) => marked.has(String(r.row.id)));
  if (sending.length === 0) {
    await permit.release();
    return { sent: 0, waitMs: 0 };
  }
  const bounds = { leaveBy: markedAt + SEND_WINDOW_MS, settleBy };
  return { sent: sending.length, waitMs: 0, flight: fly(deps, sending, permit, batchId, bounds) };
}

/**
 * The token came before the batch's flush time (size or max wait, §8): fill until then, from the
 * oldest due command's age. A shutdown ends the wait early; the caller sees the signal and releases
 * the batch.
 */
async function waitToFill(
  deps: ServiceContext,
  s: ReturnType<ServiceContext["settings"]>,
  oldestMs: number,
  signal?: AbortSignal,
): Promise<void> {
  const fillBy = Date.now() + (s.batch.maxWaitMs - oldestMs);
  let b = await backlog(deps.pool);
  while (b.due < s.batch.size && Date.now() < fillBy && !signal?.aborted) {
    await delay(Math.max(1, Math.min(FILL_POLL_MS, fillBy - Date.now())), undefined, { signal }).catch(
      () => undefined,
    );
    b = await backlog(deps.pool);
  }
}

/**
 * Claims up to batch.size commands, each with its user (the workflow's), and the App's data of every
 * user of the batch, read once, for hydration and the result.
 */
async function claimBatch(
  deps: ServiceContext,
  s: ReturnType<ServiceContext["settings"]>,
): Promise<{
  rows: Array<CommandRow & { owner_user_id: string | null }>;
  users: Map<string, AppUser | null>;
}> {
  const { rows } = await timedClaim("pump", () =>
    deps.pool.query<CommandRow & { owner_user_id: string | null }>(
      // The owner by primary key, per claimed row: a join let the planner, which takes a
      // function's result for 1000 rows, hash the whole workflow table on every claim.
      `select c.*, (select w.user_id from bitrix_sync.workflow_instances w where w.id = c.workflow_id) as owner_user_id
         from bitrix_sync.claim_commands($1, $2, make_interval(secs => $3)) c`,
      [deps.workerId, s.batch.size, s.lease.ttlSec],
    ),
  );
  const users = await loadAppUsers(
    deps.pool,
    rows.flatMap((r) => (r.owner_user_id ? [r.owner_user_id] : [])),
  );
  return { rows, users };
}

/**
 * Hydrates the claimed commands; returns those ready to send. A command that cannot be built is
 * rejected (a business failure) or dead-lettered; one not ready yet, or whose hydration failed, goes
 * back unsent.
 */
async function hydrateAll(
  deps: ServiceContext,
  rows: Array<CommandRow & { owner_user_id: string | null }>,
  users: Map<string, AppUser | null>,
  settleBy: number,
): Promise<Array<{ row: CommandRow; h: Hydrated }>> {
  const ready: Array<{ row: CommandRow; h: Hydrated }> = [];
  for (const row of rows) {
    try {
      const r = await hydrate(deps.pool, row, row.owner_user_id, deps.dictionary, users);
      if (r.ok) ready.push({ row, h: r.value });
      else if (r.failure.kind === "business")
        await settleQuietly(deps, row, "reject", r.failure.code, settleBy);
      else await settleQuietly(deps, row, "dead_letter", r.failure.code, settleBy);
    } catch (e) {
      if (!(e instanceof NotReady)) {
        deps.log.warn(
          { event: "pump.hydrate_failed", ...commandIds(row), ...safeError(e) },
          "command not prepared",
        );
      }
      await release(deps, row, settleBy);
    }
  }
  return ready;
}

/**
 * A create recorded before this process started and never sent, as the database says: after a
 * restore from backup the service on the lost database may have sent it (the restore drill found the
 * second Contact), so it goes the way of a create whose reply was lost: uncertain, and the workflow
 * searches by the user id before anything is sent again. After an ordinary restart that costs one
 * search. Such commands leave `marked`.
 */
async function holdUnproven(
  deps: ServiceContext,
  ready: Array<{ row: CommandRow; h: Hydrated }>,
  marked: Set<string>,
  settleBy: number,
): Promise<void> {
  const unproven = ready.filter(
    (r) =>
      marked.has(String(r.row.id)) &&
      r.row.command_type === "contact.add" &&
      r.row.workflow_id !== null &&
      r.row.sent_at === null &&
      r.row.created_at < PROCESS_STARTED_AT,
  );
  for (const { row } of unproven) {
    marked.delete(String(row.id));
    await whileDatabaseAway(
      () =>
        deps.pool.query("select bitrix_sync.mark_command_uncertain($1, $2, $3)", [
          row.id,
          row.lease_token,
          "issued_before_start",
        ]),
      { until: settleBy },
    );
    deps.log.info(
      { event: "pump.create_unproven", ...commandIds(row) },
      "a create recorded before this process started is looked up before it is sent",
    );
  }
}

/** leased -> pending, unsent (no attempt spent); tried again while the database is away. */
async function release(deps: ServiceContext, row: CommandRow, settleBy: number): Promise<void> {
  await whileDatabaseAway(
    () => deps.pool.query("select bitrix_sync.release_command($1, $2)", [row.id, row.lease_token]),
    { until: settleBy },
  ).catch(() => undefined);
}

/**
 * A claimed command whose send marker failed: it never left. Released when the marker did not land;
 * when it did (its commit's answer lost with the connection) the command is in_flight under this
 * token, and goes back to retry_wait at once without spending the attempt the marker counted.
 */
async function unsent(deps: ServiceContext, row: CommandRow, settleBy: number): Promise<void> {
  try {
    await whileDatabaseAway(
      () => deps.pool.query("select bitrix_sync.release_command($1, $2)", [row.id, row.lease_token]),
      { until: settleBy },
    );
  } catch (e) {
    if (sqlstate(e) !== "BS001") return;
    await whileDatabaseAway(
      () =>
        deps.pool.query(
          "select bitrix_sync.retry_command($1, $2, 'send_marker_unconfirmed', interval '0', false)",
          [row.id, row.lease_token],
        ),
      { until: settleBy },
    ).catch(() => undefined);
  }
}

/** One batch start to end, awaited: what a caller without a dispatcher of its own uses. */
export async function runPump(deps: ServiceContext, signal?: AbortSignal): Promise<PumpResult> {
  const r = await startPump(deps, signal);
  if (r.flight) await r.flight;
  return { sent: r.sent, waitMs: r.waitMs };
}

/**
 * Sends a marked batch under its permit and settles every command. The request leaves by
 * `bounds.leaveBy` or not at all; outcomes are recorded, while the database is away, until
 * `bounds.settleBy` (the commands' lease end).
 */
async function fly(
  deps: ServiceContext,
  sending: Array<{ row: CommandRow; h: Hydrated }>,
  permit: LimiterPermit,
  batchId: string,
  bounds: { leaveBy: number; settleBy: number },
): Promise<void> {
  // Each send is a span under the step that issued the command (its stored context, whichever
  // process stored it); the batch, shared by many intents, links to all of them.
  const spans = sending.map(({ row }) => commandSpan(row, batchId));
  let outcomes: CommandOutcome[];
  try {
    outcomes = await executeBatch(
      deps.crm,
      sending.map((r) => r.h.cmd),
      // No abort signal: on SIGTERM a request already out finishes within the HTTP timeout and its
      // result is recorded (R8, docs/reliability.md), instead of being cut off and left uncertain.
      { permit, batchId, links: linksTo(spans), leaveBy: bounds.leaveBy },
    );
  } catch (e) {
    for (const span of spans) {
      markFailed(span, safeErrorCode(e));
      span.end();
    }
    throw e;
  }
  await notePortal(deps, outcomes);

  // Successes that are only projected complete in one statement; every other outcome is settled on
  // its own (its own transaction, side effects and SQL transition).
  const together: Array<{ row: CommandRow; projection: Record<string, unknown>; span: Span }> = [];
  for (const [i, { row, h }] of sending.entries()) {
    const o = outcomes[i];
    const span = spans[i] as Span;
    if (!o) {
      span.end();
      continue;
    }
    span.setAttribute("bitrix_sync.outcome", o.ok ? "ok" : o.failure.kind);
    if (!o.ok) span.setAttribute("bitrix_sync.error.code", o.failure.code);
    const projection = o.ok ? projectionOnly(row, o.result, h) : null;
    if (projection) {
      together.push({ row, projection, span });
      continue;
    }
    await withSpan(span, async () => {
      await settle(deps, row, h, o, bounds.settleBy);
      logSettled(deps, row, o);
    });
    span.end();
  }
  if (together.length > 0) await completeTogether(deps, together, bounds.settleBy);
}

/** The span of one send of a command, a child of the step that issued it. */
function commandSpan(row: CommandRow, batchId: string): Span {
  return startSpan("bitrix_sync.crm.command", () => {
    const attributes: Attributes = {
      "bitrix_sync.command.id": String(row.id),
      "bitrix_sync.command.type": row.command_type,
      "bitrix_sync.command.attempt": row.attempt_count + 1,
      "bitrix_sync.batch.id": batchId,
    };
    if (row.workflow_id) attributes["bitrix_sync.workflow.id"] = row.workflow_id;
    if (row.correlation_id) attributes["bitrix_sync.correlation.id"] = row.correlation_id;
    return { attributes, parent: storedParent(row.trace_context) };
  });
}
