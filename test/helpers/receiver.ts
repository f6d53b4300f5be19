// Shared fixtures of the receiver tests: a configured app on a test database, a capturing logger,
// and robot requests built exactly as the Bitrix24 robot sends them (§10.1). The secrets below are
// test values made to be easy to grep for in captured output.
import { Writable } from "node:stream";
import type pg from "pg";
import { parseCidrList } from "../../src/config/cidr.js";
import type { ReceiverName } from "../../src/config/receivers.js";
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUERY_BYTES } from "../../src/config/receivers.js";
import { createApp } from "../../src/http/app.js";
import type { ReceiverConfig } from "../../src/inbound/config.js";
import { DOCUMENT_TYPES } from "../../src/inbound/contract.js";
import { createLogger, type Logger } from "../../src/observability/logger.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import { setSettings } from "./settings.js";

export const TOKENS = {
  contact: "tok-contact-current-7c1e9a4b2f6d8e0a3c5b7d9f1e3a5c7b",
  contactPrevious: "tok-contact-previous-0f2e4d6c8b0a1c3e5f7a9b1d3f5e7c9a",
  alert: "tok-alert-current-9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d",
  alertPrevious: "tok-alert-previous-1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e",
} as const;
export const PORTAL_HOST = "han-portal-host.bitrix24.test";
export const MEMBER_ID = "member-4d7f0c2a9e1b8d3f6a5c0e7b2d9f4a1c";
export const ALERT_ENTITY_TYPE_ID = 1038;

export function receiverConfigFor(
  opts: { previous?: boolean; trustedProxies?: string } = {},
): ReceiverConfig {
  const trusted = parseCidrList(opts.trustedProxies);
  if (!trusted.ok) throw new Error(trusted.problems.join("; "));
  return {
    tokens: {
      contact: { current: TOKENS.contact, previous: opts.previous ? TOKENS.contactPrevious : undefined },
      alert: { current: TOKENS.alert, previous: opts.previous ? TOKENS.alertPrevious : undefined },
    },
    portalHost: PORTAL_HOST,
    memberId: MEMBER_ID,
    maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
    maxQueryBytes: DEFAULT_MAX_QUERY_BYTES,
    trustedProxies: trusted.cidrs,
  };
}

/** A pino logger writing into memory, and what it wrote. */
export function captureLogger(level = "debug"): { log: Logger; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(String(chunk));
      cb();
    },
  });
  const log = createLogger({ level, destination: stream });
  return { log, text: () => chunks.join("") };
}

/** The service's app with the receivers configured as given (`null`: not configured at all). */
export function makeApp(pool: pg.Pool, log: Logger, receiver: ReceiverConfig | null = receiverConfigFor()) {
  return createApp({ pool, log, receiver: receiver ?? undefined });
}

/** The robot's form fields in the order it sends them, keys unencoded. */
export function robotFields(receiver: ReceiverName, id: string, entityTypeId = ALERT_ENTITY_TYPE_ID) {
  return [
    ["document_id[0]", "crm"],
    ["document_id[1]", DOCUMENT_TYPES[receiver]],
    ["document_id[2]", receiver === "contact" ? `CONTACT_${id}` : `DYNAMIC_${entityTypeId}_${id}`],
    ["auth[domain]", PORTAL_HOST],
    ["auth[client_endpoint]", `https://${PORTAL_HOST}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", MEMBER_ID],
  ] as Array<[string, string]>;
}

/** Form-encodes like PHP's http_build_query: brackets percent-encoded, spaces as +. */
export function encodeForm(fields: Array<[string, string]>): string {
  const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, "+");
  return fields.map(([k, v]) => `${enc(k)}=${enc(v)}`).join("&");
}

export function robotUrl(receiver: ReceiverName, id: string, token: string = TOKENS[receiver]): string {
  return `http://localhost/bitrix/sync/webhook/${receiver}?token=${encodeURIComponent(token)}&ID=${id}`;
}

export function robotInit(body: string, contentType = "application/x-www-form-urlencoded"): RequestInit {
  return { method: "POST", headers: { "content-type": contentType }, body };
}

export async function inboxCount(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.webhook_inbox",
  );
  return rows[0]?.n ?? -1;
}

/**
 * Activates a settings version with alerts.entity_type_id set (with the rest of the emulator's
 * smart process, which the catalogue requires with it) or cleared with null.
 */
export async function setAlertEntityType(pool: pg.Pool, id: number | null): Promise<void> {
  await setSettings({ pool }, { ...DEFAULT_ALERT_SETTINGS, "alerts.entity_type_id": id });
}
