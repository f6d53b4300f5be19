// What a change of an alert's smart-process item means for the alert (§10.3): a terminal stage
// closes it, a deleted item makes it remote_missing. Used by the alert webhooks and the alert
// reconciliation.
import type { Link } from "@opentelemetry/api";
import type { ServiceContext } from "../context.js";
import { executeBatch } from "../crm/batch.js";
import type { AlertItem } from "../crm/catalogue.js";
import type { AlertSettings } from "./mirror.js";

/**
 * Brings local alerts in line with their smart-process items (§10.3): a terminal stage closes the
 * alert, a deleted item makes it remote_missing. Returns how many alerts changed.
 */
export async function refreshAlertItems(
  deps: ServiceContext,
  s: AlertSettings,
  itemIds: number[],
  /** Span links to the inbox events this read serves. */
  links?: Link[],
): Promise<number> {
  if (s.entityTypeId === null || itemIds.length === 0) return 0;
  const commands = [];
  for (let i = 0; i < itemIds.length; i += 50) {
    commands.push({
      type: "alert.list" as const,
      params: { entityTypeId: s.entityTypeId, ids: itemIds.slice(i, i + 50) },
    });
  }
  const outcomes = await executeBatch(deps.crm, commands, links ? { links } : {});
  const items = new Map<number, AlertItem>();
  for (const o of outcomes) {
    if (!o.ok)
      throw Object.assign(new Error("alert items could not be read"), {
        code: o.failure.code,
        kind: o.failure.kind,
      });
    for (const it of (o.result as { items: AlertItem[] }).items) items.set(it.id, it);
  }
  let changed = 0;
  const { rows } = await deps.pool.query<{ id: string; item_id: string; status: string }>(
    "select id, item_id, status from bitrix_sync.business_alerts where item_id = any($1) and status = 'open'",
    [itemIds],
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
