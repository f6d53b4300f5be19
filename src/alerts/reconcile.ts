// Alert reconciliation (§10.3): every open alert with a smart-process item is polled (default
// hourly) in batches; a terminal stage closes it, a deleted item makes it remote_missing. A read that
// fails is sent again within the run (src/crm/read-batches.ts); one that keeps failing is reported,
// the other alerts are still brought in line, and the run fails: it is due again after the retry
// backoff, not after a whole interval.
import type { ServiceContext } from "../context.js";
import { retryDelayMs } from "../crm/backoff.js";
import { RUN_REQUEST_ATTEMPTS } from "../crm/read-batches.js";
import { whileDatabaseAway } from "../db/while-away.js";
import { inSpan, markFailed } from "../observability/tracing.js";
import { refreshAlertItems } from "./items.js";
import type { AlertSettings } from "./mirror.js";

/** What one alert reconciliation did. */
export interface AlertReconcileReport {
  ran: boolean;
  polled: number;
  changed: number;
  stopped?: boolean;
  /** The safe code of a failed run; it is due again at `retryAt`. */
  errorCode?: string;
  retryAt?: Date;
}

export async function reconcileAlerts(
  deps: ServiceContext,
  s: AlertSettings,
  intervalSec: number,
  opts: { force?: boolean; signal?: AbortSignal } = {},
): Promise<AlertReconcileReport> {
  // Until the smart process is configured there is nothing to poll, and no run to record.
  if (s.entityTypeId === null) return { ran: false, polled: 0, changed: 0 };
  // The cursor row is the run's lock (sql/reconciliation.sql), as for Contacts.
  const { rows: cur } = await deps.pool.query<{ lease_token: string; failed_runs: number }>(
    "select lease_token, failed_runs from bitrix_sync.claim_reconciliation_cursor('alerts', make_interval(secs => $1), $2)",
    [intervalSec, opts.force === true],
  );
  const claim = cur[0];
  if (!claim) return { ran: false, polled: 0, changed: 0 };
  // A run is a trace of its own; its CRM batches and HTTP calls are its children.
  return await inSpan(
    "bitrix_sync.reconcile.run",
    { root: true, attributes: { "bitrix_sync.reconcile.job": "alerts" } },
    async (span) => {
      const r = await runClaimed(deps, s, claim.lease_token, claim.failed_runs, opts.signal);
      span.setAttributes({
        "bitrix_sync.outcome": r.stopped ? "shutdown" : r.errorCode ? "failed" : "succeeded",
        "bitrix_sync.reconcile.scanned": r.polled,
        "bitrix_sync.reconcile.updated": r.changed,
      });
      if (r.errorCode) markFailed(span, r.errorCode);
      return r;
    },
  );
}

/** Items polled per Bitrix24 batch request: 50 `alert.list` commands of 50 items each. */
const ALERT_ITEMS_PER_REQUEST = 50 * 50;

/**
 * Polls the open alerts' items once the cursor is held, one batch request at a time; records the
 * run's end or its failure. On shutdown (`signal`) the run stops before its next request and gives
 * the cursor back (fail_reconciliation_run with `shutdown`), so the next replica's run starts at once
 * instead of after reconcile.lease_sec. A group of items whose read kept failing is reported and
 * skipped; the run then fails after the others were brought in line, and is due again after the
 * backoff.
 */
async function runClaimed(
  deps: ServiceContext,
  s: AlertSettings,
  token: string,
  failedRuns: number,
  signal?: AbortSignal,
): Promise<AlertReconcileReport & { ran: true }> {
  const leaseEnd = Date.now() + deps.settings().reconcile.leaseSec * 1000;
  const { rows } = await deps.pool.query<{ item_id: string }>(
    "select item_id from bitrix_sync.business_alerts where status = 'open' and item_id is not null order by item_id",
  );
  const ids = rows.map((r) => Number(r.item_id));
  let changed = 0;
  let polled = 0;
  let failedCode: string | undefined;
  try {
    for (let i = 0; i < ids.length; i += ALERT_ITEMS_PER_REQUEST) {
      if (signal?.aborted) {
        await deps.pool.query("select bitrix_sync.fail_reconciliation_run('alerts', $1, 'shutdown')", [
          token,
        ]);
        return { ran: true, polled, changed, stopped: true };
      }
      const chunk = ids.slice(i, i + ALERT_ITEMS_PER_REQUEST);
      try {
        changed += await refreshAlertItems(deps, s, chunk, undefined, {
          attempts: RUN_REQUEST_ATTEMPTS,
          signal,
        });
      } catch (e) {
        const err = e as { code?: unknown; kind?: unknown; changed?: unknown };
        // A read that failed after its sends: the other chunks go on, the run fails at the end.
        if (typeof err.kind !== "string" || typeof err.code !== "string") throw e;
        failedCode ??= err.code;
        if (typeof err.changed === "number") changed += err.changed;
        deps.log.warn(
          { event: "reconciliation.request_failed", code: err.code, commandType: "alert.list" },
          "reading alert items kept failing; the run goes on with the others",
        );
      }
      polled += chunk.length;
    }
    if (failedCode === undefined) {
      await deps.pool.query("select bitrix_sync.finish_reconciliation_run('alerts', $1, $2, $3)", [
        token,
        polled,
        changed,
      ]);
      return { ran: true, polled, changed };
    }
  } catch (e) {
    const err = e as { code?: unknown; kind?: unknown };
    if (err.code === "BS001") throw e; // the lease was taken over: the cursor is the new run's
    // Classifier codes are safe; anything else (a SQLSTATE, a socket error) is recorded as run_failed.
    failedCode = typeof err.kind === "string" && typeof err.code === "string" ? err.code : "run_failed";
  }
  const delayMs = retryDelayMs(failedRuns, deps.settings().retry);
  // As the Contact reconciliation's: a failure across a failover still gives the cursor back, tried
  // again while the database is away up to the run's lease end (src/db/while-away.ts).
  const { rows: failed } = await whileDatabaseAway(
    () =>
      deps.pool.query<{ retry_at: Date | null }>(
        "select retry_at from bitrix_sync.fail_reconciliation_run('alerts', $1, $2, make_interval(secs => $3))",
        [token, failedCode, delayMs / 1000],
      ),
    { until: leaseEnd, signal },
  );
  deps.log.warn(
    { event: "reconciliation.failed", job: "alerts", code: failedCode },
    "alert reconciliation run failed; it is retried after its backoff",
  );
  return {
    ran: true,
    polled,
    changed,
    errorCode: failedCode,
    ...(failed[0]?.retry_at ? { retryAt: failed[0].retry_at } : {}),
  };
}
