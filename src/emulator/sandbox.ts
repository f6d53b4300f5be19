// Sandbox mode (docs/operations.md, "Sandbox mode"): with no CRM webhook configured, `npm start`
// talks to the emulator on loopback instead of a portal. With a webhook configured this only checks
// the URL against the portal host (§12.2, §16) so a bad value stops the service at startup. The
// service imports this file only in sandbox mode (src/startup/crm-endpoint.ts).
import { randomBytes } from "node:crypto";
import type { Config } from "../config/env.js";
import { type CrmEndpoint, configuredCrmEndpoint } from "../startup/crm-endpoint.js";
import { type Emulator, startEmulator } from "./server.js";

interface Log {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export type { CrmEndpoint };

/**
 * Starts the emulator in sandbox mode, or validates the configured webhook URL. `firstIds`: where the
 * sandbox portal's record IDs start (above those the database already refers to).
 */
export async function startCrmEndpoint(opts: {
  config: Config;
  log: Log;
  firstIds?: { contact?: number; item?: number };
}): Promise<CrmEndpoint> {
  if (!opts.config.sandbox) return configuredCrmEndpoint(opts.config);
  return await startSandboxEndpoint(opts);
}

/** The emulator as the sandbox portal, announced in the log. */
export async function startSandboxEndpoint(opts: {
  config: Config;
  log: Log;
  firstIds?: { contact?: number; item?: number };
}): Promise<CrmEndpoint> {
  const { config, log } = opts;
  const emulator = await startSandbox({ fields: config.fields, firstIds: opts.firstIds });
  log.warn(
    { event: "sandbox.emulator", portalHost: emulator.host },
    "sandbox Bitrix24 emulator listening on loopback; no data leaves this machine",
  );
  return {
    webhookUrl: emulator.url,
    portalHost: emulator.host,
    sandbox: true,
    emulator,
    close: () => emulator.close(),
  };
}

/** Starts the emulator as the sandbox portal: loopback, random webhook secret, real limits. */
export async function startSandbox(opts: {
  fields: { userId: string; registered: string; citizenship: string };
  firstIds?: { contact?: number; item?: number };
}): Promise<Emulator> {
  return await startEmulator({
    fields: opts.fields,
    firstIds: opts.firstIds,
    secret: randomBytes(16).toString("hex"),
    rate: { drainPerSec: 2, threshold: 50 },
  });
}
