// Sandbox mode (docs/operations.md, "Sandbox mode"): with no CRM webhook configured, `npm start`
// talks to the emulator on loopback instead of a portal. The service imports this file only in
// sandbox mode (src/startup/crm-endpoint.ts, which also checks a configured webhook URL).
import { randomBytes } from "node:crypto";
import type { Config } from "../../src/config/env.js";
import { type Emulator, startEmulator } from "./server.js";

interface Log {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** The sandbox portal as the service's CRM endpoint (a CrmEndpoint of src/startup/crm-endpoint.ts). */
export interface SandboxEndpoint {
  webhookUrl: string;
  portalHost: string;
  sandbox: true;
  emulator: Emulator;
  close(): Promise<void>;
}

/**
 * The emulator as the sandbox portal, announced in the log. `firstIds`: where the sandbox portal's
 * record IDs start (above those the database already refers to).
 */
export async function startSandboxEndpoint(opts: {
  config: Config;
  log: Log;
  firstIds?: { contact?: number; item?: number };
}): Promise<SandboxEndpoint> {
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
