// A deployment as preflight sees it, for the preflight tests: the emulator as the portal, a migrated
// database, secret files in a folder of their own (mode 0600), and the environment `npm start`
// would get. Each piece can be made wrong on purpose.
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type Emulator, type EmulatorOptions, startEmulator } from "../../tools/emulator/server.js";
import { contactWorkflowTemplate, DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";

/** The alert settings matching the emulator's default smart process (tools/emulator/store.ts). */
export const ALERT_SETTINGS = DEFAULT_ALERT_SETTINGS;

export const MEMBER_ID = randomBytes(16).toString("hex");
/** The receivers' public base URL of the deployment (BITRIX_SYNC_PUBLIC_BASE_URL). */
export const PUBLIC_BASE_URL = "https://sync.example.test";
/** A phone of a sample Contact: it must never appear in preflight's output. */
export const SAMPLE_PHONE = "+79161234567";

export interface Deployment {
  emulator: Emulator;
  secretsDir: string;
  env: Record<string, string>;
  /** Every secret value written, to grep the output for. */
  secrets: string[];
  /** BITRIX_SYNC_CONTACT_RECEIVER_TOKEN, which the Contact workflow's URL carries. */
  contactToken: string;
  close(): Promise<void>;
}

export async function deployment(opts: {
  databaseUrl: string;
  /** The schema owner's connection (MIGRATION_DATABASE_URL); the database URL when absent. */
  ownerUrl?: string;
  emulator?: Partial<EmulatorOptions>;
  env?: Record<string, string | undefined>;
}): Promise<Deployment> {
  const contactToken = randomBytes(24).toString("hex");
  const emulator = await startEmulator({
    fields: SANDBOX_FIELDS,
    // As docs/portal-setup.md sets a portal up: crm, and bizproc for preflight to read the Contact
    // workflow, which starts on create and on change and posts to the Contact receiver.
    scopes: ["crm", "bizproc"],
    workflowTemplates: [
      contactWorkflowTemplate(
        `${PUBLIC_BASE_URL}/bitrix/sync/webhook/contact?token=${contactToken}&ID={=Document:ID}`,
      ),
    ],
    ...opts.emulator,
  });
  emulator.store.createContact({
    name: "Sample",
    phones: [{ value: SAMPLE_PHONE, valueType: "MOBILE" }],
    uf: { [SANDBOX_FIELDS.registered]: 1, [SANDBOX_FIELDS.userId]: "00000000-0000-4000-8000-000000000001" },
  });
  const secretsDir = mkdtempSync(join(tmpdir(), "bitrix-sync-preflight-secrets-"));
  chmodSync(secretsDir, 0o700);
  const secretValues: Record<string, string> = {
    BITRIX_SYNC_DATABASE_URL: opts.databaseUrl,
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: emulator.url,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: contactToken,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: randomBytes(24).toString("hex"),
    BITRIX_SYNC_SERVICE_TOKEN: randomBytes(24).toString("hex"),
    BITRIX_SYNC_HASH_KEY: randomBytes(32).toString("hex"),
  };
  for (const [k, v] of Object.entries(secretValues))
    writeFileSync(join(secretsDir, k), `${v}\n`, { mode: 0o600 });
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    // Generous: the emulator shares this process with other tests on a loaded machine.
    BITRIX_SYNC_HTTP_TIMEOUT_SEC: "30",
    BITRIX_SYNC_ENABLED: "false",
    BITRIX_SYNC_CONTACT_USER_ID_FIELD: SANDBOX_FIELDS.userId,
    BITRIX_SYNC_CONTACT_REGISTERED_FIELD: SANDBOX_FIELDS.registered,
    BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: SANDBOX_FIELDS.citizenship,
    BITRIX_SYNC_PORTAL_HOST: emulator.host,
    BITRIX_SYNC_PORTAL_MEMBER_ID: MEMBER_ID,
    BITRIX_SYNC_PUBLIC_BASE_URL: PUBLIC_BASE_URL,
    BITRIX_WEBHOOK_ALLOWED_CIDRS: "192.0.2.0/24",
    SECRETS_SOURCE: "file",
    BITRIX_SYNC_SECRETS_DIR: secretsDir,
    MIGRATION_DATABASE_URL: opts.ownerUrl ?? opts.databaseUrl,
  };
  for (const [k, v] of Object.entries(opts.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return {
    emulator,
    secretsDir,
    env,
    secrets: Object.values(secretValues),
    contactToken,
    async close() {
      await emulator.close();
      rmSync(secretsDir, { recursive: true, force: true });
    },
  };
}
