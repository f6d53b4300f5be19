// Mirrors business alerts into the Bitrix24 smart process (§11): an alert whose row changed
// (crm_sync_status = pending) gets an alert.add (no item yet) or alert.update command. Entity type,
// category, stages, fields and responsible come from settings; until alerts.entity_type_id is set, or
// while alerts.database_only is true, alerts stay pending in the database (visible in
// bitrix_sync.status_alert_mirror). The pump
// (src/workflows/pump.ts) sends these commands with the workflows' and reports the ones that fail;
// ./recover.ts takes over the ones that got no answer (an add is looked up before it is sent again).
import type pg from "pg";
import type { AlertFieldValue } from "../crm/catalogue.js";
import type { Settings } from "../settings-schema.js";

/** The `alerts` group of the hot settings (alerts.*). */
export type AlertSettings = Settings["alerts"];

/**
 * Whether alerts go to the smart process: its entity type is set and alerts.database_only is not.
 * Otherwise they stay in the database (pending in bitrix_sync.status_alert_mirror).
 */
export function mirrorsToCrm(s: AlertSettings): s is AlertSettings & { entityTypeId: number } {
  return s.entityTypeId !== null && !s.databaseOnly;
}

/** Usable entries of alerts.fields: logical name -> a smart-process field name (ufCrm<type>_...). */
function fieldNames(fields: AlertSettings["fields"]): Array<[string, string]> {
  return Object.entries(fields).filter(
    (e): e is [string, string] => typeof e[1] === "string" && /^ufCrm\d*_\w+$/.test(e[1]),
  );
}

export interface AlertRow {
  id: string;
  alert_number: string;
  alert_type: string;
  severity: string;
  fingerprint: string;
  user_id: string | null;
  current_contact_id: string | null;
  selected_contact_id: string | null;
  candidate_contact_ids: string[];
  details: Record<string, unknown>;
  status: string;
  item_id: string | null;
  occurrence_count: number;
  first_occurred_at: Date;
  last_occurred_at: Date;
  previous_number: string | null;
  correlation_id: string | null;
}

/** The title of an alert's item; it carries the alert number, so an item can be found by it. */
export function alertTitle(a: { alert_number: string | number; alert_type: string }): string {
  return `Sync conflict #${a.alert_number}: ${a.alert_type}`;
}

/** The item fields for one alert: title, stage, category, responsible and the mapped UF fields. */
export function alertItemFields(a: AlertRow, s: AlertSettings): Record<string, AlertFieldValue> {
  const out: Record<string, AlertFieldValue> = { title: alertTitle(a) };
  const stage = a.status === "resolved" ? s.stageResolved : a.item_id === null ? s.stageNew : null;
  if (stage) out.stageId = stage;
  if (a.item_id === null && s.categoryId !== null) out.categoryId = s.categoryId;
  if (a.item_id === null && s.responsibleId !== null) out.assignedById = s.responsibleId;
  const values: Record<string, AlertFieldValue> = {
    alert_number: Number(a.alert_number),
    fingerprint: a.fingerprint,
    type: a.alert_type,
    severity: a.severity,
    user_id: a.user_id,
    current_contact_id: a.current_contact_id,
    selected_contact_id: a.selected_contact_id,
    candidate_contact_ids: a.candidate_contact_ids.join(","),
    details: JSON.stringify(a.details),
    occurrence_count: a.occurrence_count,
    first_occurred_at: a.first_occurred_at.toISOString(),
    last_occurred_at: a.last_occurred_at.toISOString(),
    previous_alert_number: a.previous_number === null ? null : Number(a.previous_number),
    correlation_id: a.correlation_id,
  };
  for (const [logical, field] of fieldNames(s.fields)) {
    if (logical in values) out[field] = values[logical] ?? null;
  }
  return out;
}

/** Issues add/update commands for alerts that changed. Returns how many were issued. */
export async function runAlertSync(pool: pg.Pool, s: AlertSettings, limit = 20): Promise<number> {
  if (!mirrorsToCrm(s)) return 0;
  const c = await pool.connect();
  try {
    await c.query("begin");
    const { rows } = await c.query<AlertRow>(
      `select a.id, a.alert_number, a.alert_type, a.severity, a.fingerprint, a.user_id, a.current_contact_id,
              a.selected_contact_id, a.candidate_contact_ids, a.details, a.status, a.item_id, a.occurrence_count,
              a.first_occurred_at, a.last_occurred_at, p.alert_number as previous_number, a.correlation_id
         from bitrix_sync.business_alerts a
         left join bitrix_sync.business_alerts p on p.id = a.previous_alert_id
        where a.crm_sync_status = 'pending'
          -- One command of an alert at a time, an unanswered one included: a second add while the
          -- first is unresolved could create a second item.
          and not exists (select 1 from bitrix_sync.crm_commands c
                           where c.alert_id = a.id
                             and c.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile'))
          -- An earlier add may have created the item: ./recover.ts looks it up first.
          and (a.item_id is not null or not bitrix_sync._alert_add_unsafe(a.id))
        order by a.id
        limit $1
        for update of a skip locked`,
      [limit],
    );
    for (const a of rows) {
      const fields = alertItemFields(a, s);
      const params =
        a.item_id === null
          ? { entityTypeId: s.entityTypeId, fields }
          : { entityTypeId: s.entityTypeId, id: Number(a.item_id), fields };
      await c.query("select bitrix_sync.issue_alert_command($1, $2, $3)", [
        a.id,
        a.item_id === null ? "alert.add" : "alert.update",
        JSON.stringify(params),
      ]);
      // Handed to the CRM; a newer occurrence sets it back to pending and is sent after this one.
      await c.query("select bitrix_sync.mark_alert_mirrored($1)", [a.id]);
    }
    await c.query("commit");
    return rows.length;
  } catch (e) {
    await c.query("rollback").catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

/**
 * An alert command that will not complete: the alert is marked failed (visible in status), or, when
 * its item was deleted in the CRM, remote_missing (§10.3). A lookup that failed leaves the add it
 * was looking for dead-lettered (alert_lookup_failed), never re-sent blindly. Contact commands are
 * left to their workflow.
 */
export async function alertCommandFailed(
  pool: pg.Pool,
  cmd: { alert_id: string | null; command_type: string },
  code: string,
): Promise<void> {
  if (!cmd.alert_id) return;
  if (cmd.command_type === "alert.list") {
    await pool.query("select bitrix_sync.fail_alert_lookup($1)", [cmd.alert_id]);
    return;
  }
  if (code === "not_found" && cmd.command_type !== "alert.add") {
    await pool.query(
      "select bitrix_sync.finish_business_alert($1, 'remote_missing') where exists (select 1 from bitrix_sync.business_alerts where id = $1 and status = 'open')",
      [cmd.alert_id],
    );
    return;
  }
  await pool.query("select bitrix_sync.mark_alert_mirror_failed($1)", [cmd.alert_id]);
}
