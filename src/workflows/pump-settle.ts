// Settling the pump's commands (§9): each result becomes exactly one SQL transition by its
// classification kind (complete, retry with backoff, uncertain, dead letter, business rejection);
// successes that are only projected complete together in one statement.
//
// The portal's answer is in memory here, and only here. A transition that fails because the database
// is away (a restart, a failover) is tried again until `settleBy` (src/db/while-away.ts): every one of
// them is fenced by the command's lease token, which stays valid until another holder recovers the
// row after the lease's end, so a late try either records the answer or is refused (BS001) and drops
// it. Without that, a create the portal answered became uncertain when the database merely blinked,
// and its workflow waited out the lease and a late-write window before it searched (issue 36).
import type { QueryResultRow } from "pg";
import { alertCommandFailed } from "../alerts/mirror.js";
import type { ServiceContext } from "../context.js";
import { attemptsSpent, backoffDelayMs } from "../crm/backoff.js";
import type { CommandOutcome } from "../crm/batch.js";
import { type CommandType, isWrite } from "../crm/catalogue.js";
import { safeError, sqlstate } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { whileDatabaseAway } from "../db/while-away.js";
import { countRetry } from "../observability/metrics.js";
import { markFailed, type Span, safeErrorCode, withSpan } from "../observability/tracing.js";
import { BusinessFailure, type Hydrated, projectResult } from "./command-payloads.js";
import type { CommandRow } from "./types.js";

/** Successes that are only projected, completed in one statement; tried again until `settleBy`. */
export async function completeTogether(
  deps: ServiceContext,
  list: Array<{ row: CommandRow; projection: Record<string, unknown>; span: Span }>,
  settleBy: number,
): Promise<void> {
  try {
    await whileDatabaseAway(
      () =>
        deps.pool.query("select bitrix_sync.complete_commands($1::bigint[], $2::uuid[], $3::jsonb[])", [
          list.map((c) => c.row.id),
          list.map((c) => c.row.lease_token),
          list.map((c) => JSON.stringify(c.projection)),
        ]),
      { until: settleBy },
    );
    for (const c of list) {
      // Under the command's own span, as a command settled on its own: the line carries its ids.
      withSpan(c.span, () =>
        deps.log.debug(
          {
            event: "pump.settled",
            ...commandIds(c.row),
            commandType: c.row.command_type,
            outcome: "ok",
          },
          "command result recorded",
        ),
      );
    }
  } catch (e) {
    for (const c of list) markFailed(c.span, safeErrorCode(e));
    deps.log.warn(
      { event: "pump.settle_failed", commands: list.length, ...safeError(e) },
      "command results not recorded",
    );
    // Left in_flight: lease expiry turns a write into uncertain and a read into a retry.
  } finally {
    for (const c of list) c.span.end();
  }
}

export function logSettled(deps: ServiceContext, row: CommandRow, o: CommandOutcome): void {
  deps.log.debug(
    {
      event: "pump.settled",
      ...commandIds(row),
      commandType: row.command_type,
      outcome: o.ok ? "ok" : o.failure.kind,
      code: o.ok ? undefined : o.failure.code,
    },
    "command result recorded",
  );
}

/** The IDs a log line about a command carries (internal IDs, never the user's or the Contact's). */
export function commandIds(row: CommandRow): Record<string, string> {
  const ids: Record<string, string> = { commandId: String(row.id) };
  if (row.workflow_id) ids.workflowId = row.workflow_id;
  if (row.correlation_id) ids.correlationId = row.correlation_id;
  return ids;
}

export async function settleQuietly(
  deps: ServiceContext,
  row: CommandRow,
  how: "reject" | "dead_letter",
  code: string,
  settleBy: number,
) {
  const fn = how === "reject" ? "reject_command($1, $2, $3)" : "dead_letter_command($1, $2, $3)";
  await whileDatabaseAway(
    () => deps.pool.query(`select bitrix_sync.${fn}`, [row.id, row.lease_token, code]),
    {
      until: settleBy,
    },
  ).catch((e) => {
    if (sqlstate(e) !== "BS001") throw e;
  });
}

/**
 * Settles one command from its outcome: exactly one SQL transition per classification kind (§9),
 * tried again while the database is away, until `settleBy` (epoch ms).
 */
export async function settle(
  deps: ServiceContext,
  row: CommandRow,
  h: Hydrated,
  o: CommandOutcome,
  settleBy: number,
): Promise<void> {
  const s = deps.settings();
  const write = isWrite(row.command_type as CommandType);
  const query = <R extends QueryResultRow = QueryResultRow>(text: string, values: unknown[]) =>
    whileDatabaseAway(() => deps.pool.query<R>(text, values), { until: settleBy });
  try {
    if (o.ok) {
      try {
        await whileDatabaseAway(
          () =>
            inTransaction(deps.pool, async (c) => {
              const projection = await projectResult(c, row, o.result, h, { dictionary: deps.dictionary });
              await c.query("select bitrix_sync.complete_command($1, $2, $3)", [
                row.id,
                row.lease_token,
                JSON.stringify(projection),
              ]);
            }),
          { until: settleBy },
        );
      } catch (e) {
        if (e instanceof BusinessFailure) {
          await query("select bitrix_sync.reject_command($1, $2, $3)", [row.id, row.lease_token, e.code]);
          return;
        }
        throw e;
      }
      return;
    }
    const f = o.failure;
    // The claimed row counts the attempts before this send; this one counts unless it was a limit refusal.
    const spent = attemptsSpent(row) + (f.spendsAttempt ? 1 : 0);
    switch (f.kind) {
      case "transient": {
        // retry_command dead-letters instead when the retry would pass the horizon (sql/retry/deadline.sql),
        // and hands a reread_before_retry command back to its workflow (also dead_letter, own code).
        const r = await query<{ status: string; last_error_code: string | null }>(
          "select status, last_error_code from bitrix_sync.retry_command($1, $2, $3, make_interval(secs => $4), $5, $6, $7)",
          [
            row.id,
            row.lease_token,
            f.code,
            backoffDelayMs(spent, s.retry, f.retryAfterMs) / 1000,
            f.spendsAttempt,
            f.httpStatus ?? null,
            f.bitrixError ?? null,
          ],
        );
        if (r.rows[0]?.status === "retry_wait") countRetry("pump", f.code);
        if (r.rows[0]?.status === "dead_letter" && r.rows[0]?.last_error_code === "retry_horizon_exceeded") {
          deps.log.error(
            {
              event: "pump.dead_letter",
              ...commandIds(row),
              commandType: row.command_type,
              code: "retry_horizon_exceeded",
            },
            "command given up after the retry horizon",
          );
          await alertCommandFailed(deps.pool, row, "retry_horizon_exceeded");
        }
        return;
      }
      case "uncertain":
        // A workflow's step recovers its own write; an alert's is recovered by src/alerts/recover.ts.
        await query("select bitrix_sync.mark_command_uncertain($1, $2, $3)", [
          row.id,
          row.lease_token,
          f.code,
        ]);
        return;
      case "permanent":
        await query("select bitrix_sync.dead_letter_command($1, $2, $3, $4, $5)", [
          row.id,
          row.lease_token,
          f.code,
          f.httpStatus ?? null,
          f.bitrixError ?? null,
        ]);
        await alertCommandFailed(deps.pool, row, f.code);
        return;
      case "business":
        await query("select bitrix_sync.reject_command($1, $2, $3)", [row.id, row.lease_token, f.code]);
        await alertCommandFailed(deps.pool, row, f.code);
        return;
    }
  } catch (e) {
    if (sqlstate(e) === "BS001") return; // our lease ended: the new holder settles it
    deps.log.warn(
      { event: "pump.settle_failed", ...commandIds(row), write, ...safeError(e) },
      "command result not recorded",
    );
    // Leave it in_flight (the database stayed away past settleBy): lease expiry turns a write into
    // uncertain and a read into a retry.
  }
}
