// In sandbox mode nothing is configured, so the Contact robot receiver and the status endpoint would
// answer 503 for want of a token. The service generates one per run for each (only in sandbox, never
// with a real portal) and publishes them in the service file, so `npm run demo` can fire the robot
// webhook and read the status. Configured tokens are used as they are and never written anywhere.
import { randomBytes } from "node:crypto";
import type { Config } from "../config/env.js";

export interface SandboxTokens {
  contactReceiverToken?: string;
  serviceToken?: string;
}

/** The configuration with generated tokens filled in (sandbox only), and what was generated. */
export function withSandboxTokens(config: Config): { config: Config; generated: SandboxTokens } {
  if (!config.sandbox) return { config, generated: {} };
  const generated: SandboxTokens = {};
  const secrets = { ...config.secrets };
  if (secrets.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN === undefined) {
    generated.contactReceiverToken = randomBytes(24).toString("hex");
    secrets.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN = generated.contactReceiverToken;
  }
  if (secrets.BITRIX_SYNC_SERVICE_TOKEN === undefined) {
    generated.serviceToken = randomBytes(24).toString("hex");
    secrets.BITRIX_SYNC_SERVICE_TOKEN = generated.serviceToken;
  }
  return { config: { ...config, secrets }, generated };
}
