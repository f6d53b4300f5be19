// What a change of an alert's smart-process item means for the alert (§10.3): a terminal stage
// closes it, a deleted item makes it remote_missing. Used by the alert webhooks and the alert
// reconciliation.
import type { Link } from "@opentelemetry/api";
import type { ServiceContext } from "../context.js";
import type { CommandOutcome } from "../crm/batch.js";
import type { AlertItem } from "../crm/catalogue.js";
import { readBatches } from "../crm/read-batches.js";
import type { AlertSettings } from "./mirror.js";

/** How refreshAlertItems reads: sends of one sub-request (1: no retry) and the shutdown signal. */
export interface RefreshOptions {
  attempts?: number;
  signal?: AbortSignal | undefined;
  /** Called before each HTTP request; may throw to stop. */
  beforeRequest?: () => void;
}

/**
 * Brings local alerts in line with their smart-process items (§10.3): a terminal stage closes the
 * alert, a deleted item makes it remote_missing. Returns how many alerts changed. A read of a group
 * of items that failed (after `attempts` sends) leaves those alerts as they are, the others are
 * still brought in line, and then it throws (`code`, `kind` of the failure): an item that could not
 * be read is never taken for a deleted one.
 */
export async function refreshAlertItems(
  deps: ServiceContext,
  s: AlertSettings,
  itemIds: number[],
  /** Span links to the inbox events this read serves. */
  links?: Link[],
  opts: RefreshOptions = {},
): Promise<number> {
  const entityTypeId = s.entityTypeId;
  if (entityTypeId === null || itemIds.length === 0) return 0;
  const chunks: number[][] = [];
  for (let i = 0; i < itemIds.length; i += 50) chunks.push(itemIds.slice(i, i + 50));
  const outcomes = await readBatches(
    deps.crm,
    chunks.map((ids) => ({ type: "alert.list" as const, params: { entityTypeId, ids } })),
    {
      attempts: opts.attempts ?? 1,
      retry: deps.settings().retry,
      maxDelayMs: 30_000,
      signal: opts.signal,
      ...(opts.beforeRequest ? { beforeRequest: opts.beforeRequest } : {}),
      ...(links ? { links } : {}),
    },
  );
  const items = new Map<number, AlertItem>();
  const read = new Set<number>();
  let failure: (CommandOutcome & { ok: false })["failure"] | undefined;
  outcomes.forEach((o, i) => {
    if (!o.ok) {
      failure ??= o.failure;
      return;
    }
    for (const id of chunks[i] ?? []) read.add(id);
    for (const it of (o.result as { items: AlertItem[] }).items) items.set(it.id, it);
  });
  let changed = 0;
  const { rows } = await deps.pool.query<{ id: string; item_id: string; status: string }>(
    "select id, item_id, status from bitrix_sync.business_alerts where item_id = any($1) and status = 'open'",
    [[...read]],
  );
  for (const a of rows) {
    const it = items.get(Number(a.item_id));
    if (!it) {
      if (!(await finish(deps, a.id, "remote_missing", null))) continue;
      deps.log.error(
        { event: "alert.remote_missing", alertId: a.id },
        "the smart-process item of an open alert was deleted",
      );
      changed++;
    } else if (
      it.stageId &&
      (it.stageId === s.stageResolved || it.stageId === s.stageClosedWithoutResolution)
    ) {
      const status = it.stageId === s.stageResolved ? "resolved" : "closed";
      if (await finish(deps, a.id, status, it.stageId)) changed++;
    } else {
      await deps.pool.query("select bitrix_sync.record_alert_item($1, $2, $3)", [a.id, it.id, it.stageId]);
    }
  }
  if (failure) {
    throw Object.assign(new Error("alert items could not be read"), {
      code: failure.code,
      kind: failure.kind,
      changed,
    });
  }
  return changed;
}

/**
 * Finishes an alert the read above found open. Another replica's webhook or reconciliation, a
 * rebind or an admin may have finished it since (BS002: not open): a finished alert stays finished,
 * so that is not a failure of this refresh, whose other alerts still have to be brought in line.
 * Returns whether this call finished it.
 */
async function finish(
  deps: ServiceContext,
  alertId: string,
  status: "resolved" | "closed" | "remote_missing",
  stageId: string | null,
): Promise<boolean> {
  try {
    await deps.pool.query("select bitrix_sync.finish_business_alert($1, $2, $3)", [alertId, status, stageId]);
    return true;
  } catch (e) {
    if ((e as { code?: string }).code !== "BS002") throw e;
    deps.log.debug(
      { event: "alert.finished_meanwhile", alertId, status },
      "the alert was finished meanwhile",
    );
    return false;
  }
}
