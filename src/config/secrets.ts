// Secrets (§12.1): files named like the variable in BITRIX_SYNC_SECRETS_DIR (default
// /run/han-chat/secrets). SECRETS_SOURCE=env reads them from the environment, for local use only.
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";

export const SECRET_NAMES = [
  "BITRIX_SYNC_DATABASE_URL",
  "BITRIX_SYNC_CRM_REST_WEBHOOK_URL",
  "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN",
  "BITRIX_SYNC_ALERT_RECEIVER_TOKEN",
  "BITRIX_SYNC_SERVICE_TOKEN",
  // The key of the HMAC over personal data (src/hash.ts); required when sync is enabled.
  "BITRIX_SYNC_HASH_KEY",
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

export const DEFAULT_SECRETS_DIR = "/run/han-chat/secrets";

/**
 * A secret that cannot be read: its message names the secret (or the folder) and says what to do,
 * never the value.
 */
export class SecretError extends Error {
  override name = "SecretError";
  /** True when the file or folder does not exist (rather than existing but unreadable). */
  readonly missing: boolean;
  constructor(message: string, missing: boolean) {
    super(message);
    this.missing = missing;
  }
}

/** Where a missing secret was looked for, for a message: the file, or the environment. */
export function secretLocation(name: string, env: NodeJS.ProcessEnv = process.env): string {
  return (env.SECRETS_SOURCE ?? "file") === "env"
    ? `the environment variable ${name} (SECRETS_SOURCE=env)`
    : `the file ${join(env.BITRIX_SYNC_SECRETS_DIR ?? DEFAULT_SECRETS_DIR, name)}`;
}

function unreadable(name: string, file: string, code: string | undefined): SecretError {
  const why =
    code === "EACCES" || code === "EPERM"
      ? "is not readable by this process (permission denied): give the service's user read access"
      : code === "EISDIR"
        ? "is a folder, not a file: put the value in a file of that name"
        : `cannot be read (${code ?? "unknown error"}): check the file`;
  return new SecretError(`secret ${name}: the file ${file} ${why}, then start again.`, false);
}

/**
 * Reads every known secret that is present. Values are trimmed of a trailing newline only. A file
 * that exists but cannot be read, or a BITRIX_SYNC_SECRETS_DIR that was set but does not exist,
 * throws SecretError: silently running without a secret the operator meant to give is worse.
 */
export function loadSecrets(env: NodeJS.ProcessEnv = process.env): Secrets {
  const source = env.SECRETS_SOURCE ?? "file";
  const dir = env.BITRIX_SYNC_SECRETS_DIR ?? DEFAULT_SECRETS_DIR;
  if (source !== "env" && env.BITRIX_SYNC_SECRETS_DIR !== undefined) {
    let isDir = false;
    try {
      isDir = statSync(dir).isDirectory();
    } catch {
      isDir = false;
    }
    if (!isDir) {
      throw new SecretError(
        `BITRIX_SYNC_SECRETS_DIR: the folder ${dir} does not exist: create it with one file per secret, or unset the variable, then start again.`,
        true,
      );
    }
  }
  const out: Secrets = {};
  for (const name of [...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES]) {
    let value: string | undefined;
    if (source === "env") {
      value = env[name];
    } else {
      const file = join(dir, name);
      try {
        value = readFileSync(file, "utf8").replace(/\r?\n$/, "");
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== "ENOENT") throw unreadable(name, file, code);
      }
    }
    if (value !== undefined && value !== "") out[name] = value;
  }
  return out;
}
