// Where CRM calls go: the configured portal, or in sandbox mode the built-in emulator on loopback.
// The emulator is imported only in sandbox mode, so the production path (and the production image,
// which leaves tools/emulator/ out: Dockerfile, .dockerignore) never loads it. This lazy import is the
// service's one arrow into the sandbox portal (test/unit/structure/import-graph.test.ts).
import type { Config } from "../config/env.js";
import { parseWebhookUrl } from "../crm/client.js";

/** Where CRM calls go. `webhookUrl` is a secret: never log it. */
export interface CrmEndpoint {
  webhookUrl: string;
  portalHost: string;
  sandbox: boolean;
  /** The emulator (tools/emulator/server.ts), in sandbox mode. */
  emulator: { readonly host: string; readonly url: string } | null;
  close(): Promise<void>;
}

interface Log {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/**
 * The configured portal: checks the webhook URL against the portal host (§12.2, §16), so a bad value
 * stops the service at startup. Throws CrmConfigError (without echoing the URL).
 */
export function configuredCrmEndpoint(config: Config): CrmEndpoint {
  const webhookUrl = config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL as string;
  const portalHost = config.env.BITRIX_SYNC_PORTAL_HOST as string;
  parseWebhookUrl(webhookUrl, portalHost);
  return { webhookUrl, portalHost, sandbox: false, emulator: null, close: async () => undefined };
}

/**
 * The configured portal, or in sandbox mode the emulator (started now). `firstIds`: where the
 * sandbox portal's record IDs start (above those the database already refers to).
 */
export async function startCrmEndpoint(opts: {
  config: Config;
  log: Log;
  firstIds?: { contact?: number; item?: number };
}): Promise<CrmEndpoint> {
  if (!opts.config.sandbox) return configuredCrmEndpoint(opts.config);
  const { startSandboxEndpoint } = await import("../../tools/emulator/sandbox.js");
  return await startSandboxEndpoint(opts);
}
