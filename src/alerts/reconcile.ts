// Alert reconciliation (§10.3): every open alert with a smart-process item is polled (default
// hourly) in batches; a terminal stage closes it, a deleted item makes it remote_missing.
import type { ServiceContext } from "../context.js";
import { inSpan } from "../observability/tracing.js";
import { refreshAlertItems } from "./items.js";
import type { AlertSettings } from "./mirror.js";

export async function reconcileAlerts(
  deps: ServiceContext,
  s: AlertSettings,
  intervalSec: number,
  opts: { force?: boolean; signal?: AbortSignal } = {},
): Promise<{ ran: boolean; polled: number; changed: number; stopped?: boolean }> {
  // Until the smart process is configured there is nothing to poll, and no run to record.
  if (s.entityTypeId === null) return { ran: false, polled: 0, changed: 0 };
  // The cursor row is the run's lock (sql/reconciliation.sql), as for Contacts.
  const { rows: cur } = await deps.pool.query<{ lease_token: string }>(
    "select lease_token from bitrix_sync.claim_reconciliation_cursor('alerts', make_interval(secs => $1), $2)",
    [intervalSec, opts.force === true],
  );
  const token = cur[0]?.lease_token;
  if (!token) return { ran: false, polled: 0, changed: 0 };
  // A run is a trace of its own; its CRM batches and HTTP calls are its children.
  return await inSpan(
    "bitrix_sync.reconcile.run",
    { root: true, attributes: { "bitrix_sync.reconcile.job": "alerts" } },
    async (span) => {
      const r = await runClaimed(deps, s, token, opts.signal);
      span.setAttributes({
        "bitrix_sync.outcome": r.stopped ? "shutdown" : "succeeded",
        "bitrix_sync.reconcile.scanned": r.polled,
        "bitrix_sync.reconcile.updated": r.changed,
      });
      return r;
    },
  );
}

/** Items polled per Bitrix24 batch request: 50 `alert.list` commands of 50 items each. */
export const ALERT_ITEMS_PER_REQUEST = 50 * 50;

/**
 * Polls the open alerts' items once the cursor is held, one batch request at a time; records the
 * run's end or its failure. On shutdown (`signal`) the run stops before its next request and gives
 * the cursor back (fail_reconciliation_run with `shutdown`), so the next replica's run starts at once
 * instead of after reconcile.lease_sec.
 */
async function runClaimed(
  deps: ServiceContext,
  s: AlertSettings,
  token: string,
  signal?: AbortSignal,
): Promise<{ ran: true; polled: number; changed: number; stopped?: boolean }> {
  const { rows } = await deps.pool.query<{ item_id: string }>(
    "select item_id from bitrix_sync.business_alerts where status = 'open' and item_id is not null order by item_id",
  );
  const ids = rows.map((r) => Number(r.item_id));
  try {
    let changed = 0;
    let polled = 0;
    for (let i = 0; i < ids.length; i += ALERT_ITEMS_PER_REQUEST) {
      if (signal?.aborted) {
        await deps.pool.query("select bitrix_sync.fail_reconciliation_run('alerts', $1, 'shutdown')", [
          token,
        ]);
        return { ran: true, polled, changed, stopped: true };
      }
      const chunk = ids.slice(i, i + ALERT_ITEMS_PER_REQUEST);
      changed += await refreshAlertItems(deps, s, chunk);
      polled += chunk.length;
    }
    await deps.pool.query("select bitrix_sync.finish_reconciliation_run('alerts', $1, $2, $3)", [
      token,
      polled,
      changed,
    ]);
    return { ran: true, polled, changed };
  } catch (e) {
    const err = e as { code?: unknown; kind?: unknown };
    if (err.code === "BS001") throw e; // the lease was taken over: the cursor is the new run's
    // Classifier codes are safe; anything else (a SQLSTATE, a socket error) is recorded as run_failed.
    const code = typeof err.kind === "string" && typeof err.code === "string" ? err.code : "run_failed";
    await deps.pool.query("select bitrix_sync.fail_reconciliation_run('alerts', $1, $2)", [token, code]);
    throw e;
  }
}
