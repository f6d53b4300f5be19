// CRM -> App (§5.5, §10.1–§10.3): processing of accepted robot webhooks, and the shared code that
// applies a Contact read by ID (also used by reconciliation). The CRM source timestamp decides:
// a late or out-of-order event changes nothing.
import type pg from "pg";
import { retryDelayMs } from "../crm/backoff.js";
import { executeBatch } from "../crm/batch.js";
import type { AlertItem } from "../crm/catalogue.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { inTransaction } from "../db/tx.js";
import { webhookOutcomes } from "../observability/metrics.js";
import type { AlertSettings } from "./alert-sync.js";
import { raiseAlert } from "./alerts.js";
import { type ApplySource, applyCrmMaster, markSnapshotStale } from "./app-data.js";
import type { EngineDeps } from "./engine.js";

/** What happened to one Contact read by ID. Low-cardinality: used as outcome codes and labels. */
export type ContactOutcome =
  | "applied"
  | "stale"
  | "unknown_mapping"
  | "user_id_mismatch"
  | "registration_inactive"
  | "contact_not_found"
  | "unknown_citizenship";

export interface MappedContact {
  contactId: number;
  userId: string;
  mappingId: string;
}

/** Active mappings of these Contact IDs. */
export async function activeMappings(
  db: pg.Pool | pg.PoolClient,
  contactIds: number[],
): Promise<Map<number, MappedContact>> {
  const { rows } = await db.query<{ id: string; entity_id: string; external_id: string }>(
    "select id, entity_id, external_id from bitrix_sync.entity_external_mapping where status = 'active' and external_id = any($1)",
    [contactIds.map(String)],
  );
  return new Map(
    rows.map((r) => [
      Number(r.external_id),
      { contactId: Number(r.external_id), userId: r.entity_id, mappingId: r.id },
    ]),
  );
}

/**
 * Applies one Contact (or its absence) to the App in `c`: the checks of §5.5 steps 5–7. Returns the
 * outcome and whether the App changed with a CRM timestamp newer than the snapshot had.
 */
export async function applyContact(
  c: pg.PoolClient,
  deps: Pick<EngineDeps, "dictionary">,
  m: MappedContact,
  contact: ContactRecord | undefined,
  source: Exclude<ApplySource, "app_create">,
  webhookReceivedAt: Date | null = null,
): Promise<ContactOutcome> {
  if (!contact) {
    // Mapping broken, App data kept but marked stale, alert (§5.5).
    await c.query("select bitrix_sync.close_mapping($1, 'contact_not_found', null, true)", [m.mappingId]);
    await markSnapshotStale(c, String(m.contactId), m.userId, "contact_not_found");
    await raiseAlert(c, { type: "contact_not_found", userId: m.userId, currentContactId: m.contactId });
    return "contact_not_found";
  }
  if (contact.userId !== m.userId) {
    await raiseAlert(c, { type: "user_id_mismatch", userId: m.userId, currentContactId: m.contactId });
    return "user_id_mismatch";
  }
  if (contact.registered === false) return "registration_inactive";
  const r = await applyCrmMaster(c, m.userId, contact, source, deps.dictionary, { webhookReceivedAt });
  if (r.applied) return "applied";
  if (r.stale) return "stale";
  await raiseAlert(c, {
    type: "unknown_citizenship",
    userId: m.userId,
    currentContactId: m.contactId,
    details: { enum_id: r.enumId },
  });
  return "unknown_citizenship";
}

interface InboxRow {
  id: string;
  receiver: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
  received_at: Date;
}

/** Retries (or, for a permanent failure, dead-letters) claimed events; SQL gives up past the horizon. */
async function retryRows(
  deps: EngineDeps,
  rows: InboxRow[],
  code: string,
  permanent: boolean,
): Promise<void> {
  const s = deps.settings();
  for (const r of rows) {
    if (permanent) {
      await deps.pool.query("select bitrix_sync.dead_letter_webhook($1, $2, $3)", [
        r.id,
        r.lease_token,
        code,
      ]);
      continue;
    }
    const { rows: out } = await deps.pool.query<{ status: string }>(
      "select status from bitrix_sync.retry_webhook($1, $2, $3, make_interval(secs => $4))",
      [r.id, r.lease_token, code, retryDelayMs(r.attempt_count - 1, s.retry) / 1000],
    );
    if (out[0]?.status === "dead_letter") {
      deps.log.error(
        { event: "webhook.dead_letter", receiver: r.receiver, code: "retry_horizon_exceeded" },
        "webhook given up after the retry horizon",
      );
    }
  }
}

/** One round of the Contact receiver's inbox: at most one read per Contact. Returns rows handled. */
export async function processContactWebhooks(deps: EngineDeps, limit = 50): Promise<number> {
  const s = deps.settings();
  const { rows } = await deps.pool.query<InboxRow>(
    "select id, receiver, entity_id, lease_token, attempt_count, received_at from bitrix_sync.claim_webhooks($1, $2, make_interval(secs => $3), 'contact')",
    [deps.workerId, limit, s.lease.ttlSec],
  );
  if (rows.length === 0) return 0;
  const mappings = await activeMappings(
    deps.pool,
    rows.map((r) => Number(r.entity_id)),
  );
  const mapped = rows.filter((r) => mappings.has(Number(r.entity_id)));
  for (const r of rows.filter((x) => !mappings.has(Number(x.entity_id)))) {
    // Not ours (or no longer active): acknowledged, App untouched, counted by outcome only.
    await deps.pool.query("select bitrix_sync.complete_webhook($1, $2, 'unknown_mapping')", [
      r.id,
      r.lease_token,
    ]);
    webhookOutcomes.inc({ receiver: "contact", outcome: "unknown_mapping" });
    deps.log.info(
      { event: "webhook.processed", receiver: "contact", outcome: "unknown_mapping" },
      "webhook for an unmapped Contact",
    );
  }
  if (mapped.length === 0) return rows.length;
  const [o] = await executeBatch(deps.crm, [
    { type: "contact.read", params: { ids: mapped.map((r) => Number(r.entity_id)) } },
  ]);
  if (!o?.ok) {
    const f = o && !o.ok ? o.failure : null;
    await retryRows(deps, mapped, f?.code ?? "batch_result_missing", f?.kind === "permanent");
    return rows.length;
  }
  const byId = new Map((o.result as { contacts: ContactRecord[] }).contacts.map((c) => [c.id, c]));
  for (const r of mapped) {
    const m = mappings.get(Number(r.entity_id)) as MappedContact;
    try {
      const outcome = await inTransaction(deps.pool, async (c) => {
        const out = await applyContact(c, deps, m, byId.get(m.contactId), "webhook", r.received_at);
        await c.query("select bitrix_sync.complete_webhook($1, $2, $3)", [r.id, r.lease_token, out]);
        return out;
      });
      webhookOutcomes.inc({ receiver: "contact", outcome });
      deps.log.info({ event: "webhook.processed", receiver: "contact", outcome }, "webhook processed");
    } catch (e) {
      deps.log.warn(
        { event: "webhook.process_failed", receiver: "contact", sqlstate: (e as { code?: string }).code },
        "webhook not processed; will retry",
      );
      await retryRows(deps, [r], "apply_failed", false).catch(() => undefined);
    }
  }
  return rows.length;
}

/**
 * Brings local alerts in line with their smart-process items (§10.3): a terminal stage closes the
 * alert, a deleted item makes it remote_missing. Returns how many alerts changed.
 */
export async function refreshAlertItems(
  deps: EngineDeps,
  s: AlertSettings,
  itemIds: number[],
): Promise<number> {
  if (s.entityTypeId === null || itemIds.length === 0) return 0;
  const commands = [];
  for (let i = 0; i < itemIds.length; i += 50) {
    commands.push({
      type: "alert.list" as const,
      params: { entityTypeId: s.entityTypeId, ids: itemIds.slice(i, i + 50) },
    });
  }
  const outcomes = await executeBatch(deps.crm, commands);
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
      await deps.pool.query("select bitrix_sync.finish_business_alert($1, 'remote_missing')", [a.id]);
      deps.log.error(
        { event: "alert.remote_missing", alertId: a.id },
        "the smart-process item of an open alert was deleted",
      );
      changed++;
    } else if (
      it.stageId &&
      (it.stageId === s.stageResolved || it.stageId === s.stageClosedWithoutResolution)
    ) {
      await deps.pool.query("select bitrix_sync.finish_business_alert($1, $2, $3)", [
        a.id,
        it.stageId === s.stageResolved ? "resolved" : "closed",
        it.stageId,
      ]);
      changed++;
    } else {
      await deps.pool.query("select bitrix_sync.record_alert_item($1, $2, $3)", [a.id, it.id, it.stageId]);
    }
  }
  return changed;
}

/** One round of the alert receiver's inbox. Returns rows handled. */
export async function processAlertWebhooks(deps: EngineDeps, s: AlertSettings, limit = 50): Promise<number> {
  const settings = deps.settings();
  const { rows } = await deps.pool.query<InboxRow>(
    "select id, receiver, entity_id, lease_token, attempt_count, received_at from bitrix_sync.claim_webhooks($1, $2, make_interval(secs => $3), 'alert')",
    [deps.workerId, limit, settings.lease.ttlSec],
  );
  if (rows.length === 0) return 0;
  try {
    await refreshAlertItems(
      deps,
      s,
      rows.map((r) => Number(r.entity_id)),
    );
  } catch (e) {
    await retryRows(
      deps,
      rows,
      String((e as { code?: string }).code ?? "alert_read_failed"),
      (e as { kind?: string }).kind === "permanent",
    );
    return rows.length;
  }
  for (const r of rows) {
    await deps.pool.query("select bitrix_sync.complete_webhook($1, $2, 'refreshed')", [r.id, r.lease_token]);
  }
  return rows.length;
}
