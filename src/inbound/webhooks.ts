// A robot webhook to an App update (§10.1–§10.3, §5.5): the receiver (./routes.ts) checks the request
// and only records the event in bitrix_sync.webhook_inbox (coalesced per Contact); this file is the
// rest. The webhooks lane of the sync loop claims the inbox rows, reads every Contact of the round by
// ID in one batch (the webhook's body is never trusted for data), and applies each to the App in its
// own transaction (./apply-contact.ts: a read older than the snapshot changes nothing, a held link
// applies nothing). A failed read is retried with backoff until the horizon (a permanent failure is dead-lettered at
// once).
// An alert event refreshes the smart-process item's alert (src/alerts/items.ts).
//
// Where the path ends (a manager edits a Contact, its robot calls the webhook): the App's profile
// han_app.client_profile (full_name, citizenship, email, source_updated_at, written by
// bitrix_sync.apply_crm_master_fields as the App writer, so the App's trigger records no intent back)
// and the App's copy of the Contact bitrix_sync.contact_snapshots; a held link records its read in
// bitrix_sync.entity_external_mapping (sql/mapping/held.sql), a Contact that is gone closes its
// mapping there and marks the snapshot stale; a refusal (unknown citizenship, a Contact not found)
// raises a row of bitrix_sync.business_alerts; the inbox row (bitrix_sync.webhook_inbox) ends
// completed, retried or dead-lettered (bitrix_sync.technical_dead_letters).
//
// Each claimed event is a span (bitrix_sync.inbox.process) under the context its receiver request
// stored with it; the one CRM read that serves a round's events links to all of them.
import { refreshAlertItems } from "../alerts/items.js";
import type { AlertSettings } from "../alerts/mirror.js";
import type { ServiceContext } from "../context.js";
import { attemptsSpent, backoffDelayMs } from "../crm/backoff.js";
import { executeBatch } from "../crm/batch.js";
import type { ContactRecord } from "../crm/contact-fields.js";
import { failureCode } from "../db/errors.js";
import { inTransaction } from "../db/tx.js";
import { countRetry, timedClaim, webhookApplyLag, webhookOutcomes } from "../observability/metrics.js";
import {
  linksTo,
  markFailed,
  type Span,
  startSpan,
  storedParent,
  withSpan,
} from "../observability/tracing.js";
import { activeMappings, applyContact, type MappedContact } from "./apply-contact.js";

interface InboxRow {
  id: string;
  receiver: string;
  entity_id: string;
  lease_token: string;
  attempt_count: number;
  received_at: Date;
  trace_context: string | null;
}

const CLAIM = `select id, receiver, entity_id, lease_token, attempt_count, received_at, trace_context
                 from bitrix_sync.claim_webhooks($1, $2, make_interval(secs => $3), $4)`;

/** Receipt to committed processing of the row (the oldest event of its coalesced group). */
function observeLag(r: InboxRow): void {
  webhookApplyLag.observe({ receiver: r.receiver }, Math.max(0, Date.now() - r.received_at.getTime()) / 1000);
}

/** The processing span of one claimed event, a child of its receiver request's inbox write. */
function processSpan(r: InboxRow): Span {
  return startSpan("bitrix_sync.inbox.process", () => ({
    parent: storedParent(r.trace_context),
    attributes: {
      "bitrix_sync.inbox.id": String(r.id),
      "bitrix_sync.webhook.receiver": r.receiver,
      "bitrix_sync.inbox.attempt": r.attempt_count,
    },
  }));
}

/** Ends an event's span with its outcome code. */
function finish(span: Span, outcome: string, failed = false): void {
  span.setAttribute("bitrix_sync.outcome", outcome);
  if (failed) markFailed(span, outcome);
  span.end();
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
      [r.id, r.lease_token, code, backoffDelayMs(attemptsSpent(r), s.retry) / 1000],
    );
    if (out[0]?.status === "retry_wait") countRetry("webhooks", code);
    if (out[0]?.status === "dead_letter") {
      deps.log.error(
        { event: "webhook.dead_letter", receiver: r.receiver, inboxId: r.id, code: "retry_horizon_exceeded" },
        "webhook given up after the retry horizon",
      );
    }
  }
}

/** One round of the Contact receiver's inbox: at most one read per Contact. Returns rows handled. */
export async function processContactWebhooks(deps: ServiceContext, limit = 50): Promise<number> {
  const s = deps.settings();
  const { rows } = await timedClaim("webhooks", () =>
    deps.pool.query<InboxRow>(CLAIM, [deps.workerId, limit, s.lease.ttlSec, "contact"]),
  );
  if (rows.length === 0) return 0;
  const spans = new Map(rows.map((r) => [r.id, processSpan(r)]));
  const spanOf = (r: InboxRow) => spans.get(r.id) as Span;
  try {
    const mappings = await activeMappings(
      deps.pool,
      rows.map((r) => Number(r.entity_id)),
    );
    const mapped = rows.filter((r) => mappings.has(Number(r.entity_id)));
    for (const r of rows.filter((x) => !mappings.has(Number(x.entity_id)))) {
      // Not ours (or no longer active): acknowledged, App untouched, counted by outcome only.
      await withSpan(spanOf(r), async () => {
        await deps.pool.query("select bitrix_sync.complete_webhook($1, $2, 'unknown_mapping')", [
          r.id,
          r.lease_token,
        ]);
        webhookOutcomes.inc({ receiver: "contact", outcome: "unknown_mapping" });
        observeLag(r);
        deps.log.info(
          { event: "webhook.processed", receiver: "contact", inboxId: r.id, outcome: "unknown_mapping" },
          "webhook for an unmapped Contact",
        );
      });
      finish(spanOf(r), "unknown_mapping");
    }
    if (mapped.length === 0) return rows.length;
    const [o] = await executeBatch(
      deps.crm,
      [{ type: "contact.read", params: { ids: mapped.map((r) => Number(r.entity_id)) } }],
      { links: linksTo(mapped.map(spanOf)) },
    );
    if (!o?.ok) {
      const f = o && !o.ok ? o.failure : null;
      const code = f?.code ?? "batch_result_missing";
      await retryRows(deps, mapped, code, f?.kind === "permanent");
      for (const r of mapped) finish(spanOf(r), code, true);
      return rows.length;
    }
    const byId = new Map((o.result as { contacts: ContactRecord[] }).contacts.map((c) => [c.id, c]));
    for (const r of mapped) {
      const m = mappings.get(Number(r.entity_id)) as MappedContact;
      await withSpan(spanOf(r), async () => {
        try {
          const outcome = await inTransaction(deps.pool, async (c) => {
            const out = await applyContact(c, deps, m, byId.get(m.contactId), "webhook", r.received_at);
            await c.query("select bitrix_sync.complete_webhook($1, $2, $3)", [r.id, r.lease_token, out]);
            return out;
          });
          webhookOutcomes.inc({ receiver: "contact", outcome });
          observeLag(r);
          deps.log.info(
            { event: "webhook.processed", receiver: "contact", inboxId: r.id, outcome },
            "webhook processed",
          );
          finish(spanOf(r), outcome);
        } catch (e) {
          // app_row_security: a policy on an App table refused the write (docs/security.md).
          const code = failureCode(e, "apply_failed");
          deps.log.warn(
            {
              event: "webhook.process_failed",
              receiver: "contact",
              inboxId: r.id,
              code,
              sqlstate: (e as { code?: string }).code,
            },
            "webhook not processed; will retry",
          );
          await retryRows(deps, [r], code, false).catch(() => undefined);
          finish(spanOf(r), code, true);
        }
      });
    }
    return rows.length;
  } finally {
    // Whatever ended the round early (a database error) ends the spans still open, unlabelled.
    for (const span of spans.values()) if (span.isRecording()) span.end();
  }
}

/** One round of the alert receiver's inbox. Returns rows handled. */
export async function processAlertWebhooks(
  deps: ServiceContext,
  s: AlertSettings,
  limit = 50,
): Promise<number> {
  const settings = deps.settings();
  const { rows } = await timedClaim("webhooks", () =>
    deps.pool.query<InboxRow>(CLAIM, [deps.workerId, limit, settings.lease.ttlSec, "alert"]),
  );
  if (rows.length === 0) return 0;
  const spans = rows.map(processSpan);
  try {
    try {
      await refreshAlertItems(
        deps,
        s,
        rows.map((r) => Number(r.entity_id)),
        linksTo(spans),
      );
    } catch (e) {
      const code = String((e as { code?: string }).code ?? "alert_read_failed");
      await retryRows(deps, rows, code, (e as { kind?: string }).kind === "permanent");
      for (const span of spans) finish(span, code, true);
      return rows.length;
    }
    for (const [i, r] of rows.entries()) {
      await deps.pool.query("select bitrix_sync.complete_webhook($1, $2, 'refreshed')", [
        r.id,
        r.lease_token,
      ]);
      webhookOutcomes.inc({ receiver: "alert", outcome: "refreshed" });
      observeLag(r);
      finish(spans[i] as Span, "refreshed");
    }
    return rows.length;
  } finally {
    for (const span of spans) if (span.isRecording()) span.end();
  }
}
