// Processing of accepted robot webhooks (§10.1–§10.3): the webhooks lane of the sync loop claims
// the inbox rows of each receiver. A Contact event reads the Contact by ID and applies it to the App;
// an alert event refreshes the smart-process item's alert (src/alerts/items.ts).
import { refreshAlertItems } from "../alerts/items.js";
import type { AlertSettings } from "../alerts/mirror.js";
import type { ServiceContext } from "../context.js";
import { retryDelayMs } from "../crm/backoff.js";
import { executeBatch } from "../crm/batch.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { inTransaction } from "../db/tx.js";
import { countRetry, timedClaim, webhookApplyLag, webhookOutcomes } from "../observability/metrics.js";
import { activeMappings, applyContact, type MappedContact } from "./apply-contact.js";

interface InboxRow {
  id: string;
  receiver: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
  received_at: Date;
}

/** Receipt to committed processing of the row (the oldest event of its coalesced group). */
function observeLag(r: InboxRow): void {
  webhookApplyLag.observe({ receiver: r.receiver }, Math.max(0, Date.now() - r.received_at.getTime()) / 1000);
}

/** Retries (or, for a permanent failure, dead-letters) claimed events; SQL gives up past the horizon. */
async function retryRows(
  deps: ServiceContext,
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
    if (out[0]?.status === "retry_wait") countRetry("webhooks", code);
    if (out[0]?.status === "dead_letter") {
      deps.log.error(
        { event: "webhook.dead_letter", receiver: r.receiver, code: "retry_horizon_exceeded" },
        "webhook given up after the retry horizon",
      );
    }
  }
}

/** One round of the Contact receiver's inbox: at most one read per Contact. Returns rows handled. */
export async function processContactWebhooks(deps: ServiceContext, limit = 50): Promise<number> {
  const s = deps.settings();
  const { rows } = await timedClaim("webhooks", () =>
    deps.pool.query<InboxRow>(
      "select id, receiver, entity_id, lease_token, attempt_count, received_at from bitrix_sync.claim_webhooks($1, $2, make_interval(secs => $3), 'contact')",
      [deps.workerId, limit, s.lease.ttlSec],
    ),
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
    observeLag(r);
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
      observeLag(r);
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

/** One round of the alert receiver's inbox. Returns rows handled. */
export async function processAlertWebhooks(
  deps: ServiceContext,
  s: AlertSettings,
  limit = 50,
): Promise<number> {
  const settings = deps.settings();
  const { rows } = await timedClaim("webhooks", () =>
    deps.pool.query<InboxRow>(
      "select id, receiver, entity_id, lease_token, attempt_count, received_at from bitrix_sync.claim_webhooks($1, $2, make_interval(secs => $3), 'alert')",
      [deps.workerId, limit, settings.lease.ttlSec],
    ),
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
    webhookOutcomes.inc({ receiver: "alert", outcome: "refreshed" });
    observeLag(r);
  }
  return rows.length;
}
