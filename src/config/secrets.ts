// Secrets (§12.1): files named like the variable in BITRIX_SYNC_SECRETS_DIR (default
// /run/han-chat/secrets). SECRETS_SOURCE=env reads them from the environment, for local use only.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

export const SECRET_NAMES = [
  "BITRIX_SYNC_DATABASE_URL",
  "BITRIX_SYNC_CRM_REST_WEBHOOK_URL",
  "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN",
  "BITRIX_SYNC_ALERT_RECEIVER_TOKEN",
  "BITRIX_SYNC_SERVICE_TOKEN",
] as const;
export type SecretName = (typeof SECRET_NAMES)[number];

/**
 * Previous receiver tokens stay valid during a rotation overlap. They are optional secrets of the
 * same kind, named with a `_PREVIOUS` suffix.
 */
export const OPTIONAL_SECRET_NAMES = [
  "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS",
  "BITRIX_SYNC_ALERT_RECEIVER_TOKEN_PREVIOUS",
] as const;

export type Secrets = Partial<Record<SecretName | (typeof OPTIONAL_SECRET_NAMES)[number], string>>;

/** Reads every known secret that is present. Values are trimmed of a trailing newline only. */
export function loadSecrets(env: NodeJS.ProcessEnv = process.env): Secrets {
  const source = env.SECRETS_SOURCE ?? "file";
  const dir = env.BITRIX_SYNC_SECRETS_DIR ?? "/run/han-chat/secrets";
  const out: Secrets = {};
  for (const name of [...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES]) {
    let value: string | undefined;
    if (source === "env") {
      value = env[name];
    } else {
      const file = join(dir, name);
      if (existsSync(file)) value = readFileSync(file, "utf8").replace(/\r?\n$/, "");
    }
    if (value !== undefined && value !== "") out[name] = value;
  }
  return out;
}
