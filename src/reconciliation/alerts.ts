// Alert reconciliation (§10.3): every open alert with a smart-process item is polled (default
// hourly) in batches; a terminal stage closes it, a deleted item makes it remote_missing.
import type { AlertSettings } from "../workflows/alert-sync.js";
import type { EngineDeps } from "../workflows/engine.js";
import { refreshAlertItems } from "../workflows/inbound.js";

export async function reconcileAlerts(
  deps: EngineDeps,
  s: AlertSettings,
  intervalSec: number,
  opts: { force?: boolean } = {},
): Promise<{ ran: boolean; polled: number; changed: number }> {
  const { rows: cur } = await deps.pool.query<{ due: boolean }>(
    `insert into bitrix_sync.reconciliation_cursors (job_type, last_run_started_at, last_run_status)
     values ('alerts', now(), 'running')
     on conflict (job_type) do update set last_run_started_at = now(), last_run_status = 'running'
       where $1 or bitrix_sync.reconciliation_cursors.last_run_started_at is null
          or bitrix_sync.reconciliation_cursors.last_run_started_at <= now() - make_interval(secs => $2)
     returning true as due`,
    [opts.force === true, intervalSec],
  );
  if (!cur[0]?.due || s.entityTypeId === null) return { ran: false, polled: 0, changed: 0 };
  const { rows } = await deps.pool.query<{ item_id: string }>(
    "select item_id from bitrix_sync.business_alerts where status = 'open' and item_id is not null order by item_id",
  );
  try {
    const changed = await refreshAlertItems(
      deps,
      s,
      rows.map((r) => Number(r.item_id)),
    );
    await deps.pool.query(
      `update bitrix_sync.reconciliation_cursors
          set last_run_status = 'succeeded', last_success_at = now(), watermark = last_run_started_at,
              last_scanned = $1, last_updated = $2, last_error_code = null
        where job_type = 'alerts'`,
      [rows.length, changed],
    );
    return { ran: true, polled: rows.length, changed };
  } catch (e) {
    await deps.pool.query(
      "update bitrix_sync.reconciliation_cursors set last_run_status = 'failed', last_error_code = $1 where job_type = 'alerts'",
      [String((e as { code?: string }).code ?? "run_failed").slice(0, 64)],
    );
    throw e;
  }
}
