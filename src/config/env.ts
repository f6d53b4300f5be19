// Non-secret configuration (§12.2) plus the secrets (§12.1), validated once at startup. An invalid
// value stops the service with a message that names the variable but never echoes a secret.
import { isAbsolute } from "node:path";
import { z } from "zod";
import { type Cidr, type CidrRules, parseCidrList } from "./cidr.js";
import { toRestFieldName } from "./fields.js";
import type { ConfigProblem } from "./problem.js";
import { loadSecrets, type Secrets, secretLocation } from "./secrets.js";
import { tokenProblems } from "./tokens.js";

const boolish = z
  .enum(["true", "false", "1", "0", "yes", "no"])
  .transform((v) => v === "true" || v === "1" || v === "yes");

const fieldName = z.string().regex(/^UF_CRM_\d+$/, "must look like UF_CRM_<digits>");

/** Comma-separated CIDRs (src/config/cidr.ts); unset or blank is the empty list. */
const cidrList = (rules: CidrRules = {}) =>
  z
    .string()
    .optional()
    .transform((text, ctx): Cidr[] => {
      const r = parseCidrList(text, rules);
      if (r.ok) return r.cidrs;
      for (const message of r.problems) ctx.addIssue({ code: "custom", message });
      return z.NEVER;
    });

/**
 * The service's environment (§12.1 names the secrets, §12.2 the rest). Exported for the tools that
 * must read the same configuration as the service: the nginx renderer and the examples' test.
 */
export const EnvSchema = z.object({
  // Read at start only (Config.processing): a change needs a restart. The hot pause is pause_sync().
  BITRIX_SYNC_ENABLED: boolish.optional(),
  // Unset: sandbox mode only with neither a CRM webhook nor a database configured (the embedded one).
  // true: sandbox mode, also on a configured database that the sandbox created itself.
  // false: never sandbox mode; a missing CRM webhook URL stops the service.
  BITRIX_SYNC_SANDBOX: boolish.optional(),
  BITRIX_SYNC_MODE: z.enum(["full"]).default("full"),
  BITRIX_SYNC_CONTACT_USER_ID_FIELD: fieldName.optional(),
  BITRIX_SYNC_CONTACT_REGISTERED_FIELD: fieldName.optional(),
  BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: fieldName.optional(),
  BITRIX_SYNC_PORTAL_HOST: z
    .string()
    .regex(/^[a-z0-9.-]+(:\d{1,5})?$/i, "must be a host name, optionally with :port")
    .optional(),
  BITRIX_SYNC_PORTAL_MEMBER_ID: z.string().min(1).max(128).optional(),
  BITRIX_SYNC_PUBLIC_BASE_URL: z.url().optional(),
  // Applied by nginx, not by the service (§10.1): see src/config/nginx.ts.
  // No network wider than /8 (IPv4) or /32 (IPv6).
  BITRIX_WEBHOOK_ALLOWED_CIDRS: cidrList({ limitWidth: true }),
  // Peers whose X-Real-IP the receivers record as the client's address; none by default.
  BITRIX_SYNC_TRUSTED_PROXY_CIDRS: cidrList(),
  BITRIX_SYNC_HTTP_TIMEOUT_SEC: z.coerce.number().int().min(1).max(60).default(10),
  BITRIX_SYNC_DB_POOL_SIZE: z.coerce.number().int().min(2).max(100).default(5),
  BITRIX_SYNC_MIGRATE_ON_START: boolish.default(true),
  OTEL_EXPORTER_OTLP_ENDPOINT: z.url().optional(),
  SECRETS_SOURCE: z.enum(["selectel", "file", "env"]).default("selectel"),
  // Read by loadSecrets (secrets.ts) from the raw environment; validated here like the rest.
  BITRIX_SYNC_SECRETS_DIR: z
    .string()
    .refine(isAbsolute, "must be an absolute path")
    .default("/run/han-chat/secrets"),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default("0.0.0.0"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  SERVICE_ENVIRONMENT: z.string().max(32).default("local"),
  /** Local state (the embedded PostgreSQL, the sandbox service file); default `.data` in the project. */
  BITRIX_SYNC_DATA_DIR: z.string().min(1).optional(),
});

export type Env = z.infer<typeof EnvSchema>;

export interface Fields {
  userId: string;
  registered: string;
  citizenship: string;
  /** REST (universal CRM) names, derived one to one. */
  rest: { userId: string; registered: string; citizenship: string };
}

export interface Config {
  env: Env;
  secrets: Secrets;
  /**
   * Run against the built-in emulator: no CRM webhook configured, and either no database configured
   * (the embedded one) or BITRIX_SYNC_SANDBOX=true (then only on a database the sandbox created:
   * src/startup/sandbox-database.ts). Never on any other database.
   */
  sandbox: boolean;
  /**
   * Whether workers claim work. false keeps every pending row (§17 rollback). Read once at start
   * (BITRIX_SYNC_ENABLED): changing it needs a restart of every replica. To stop and resume the
   * deployment without one, an admin pauses (bitrix_sync.pause_sync, sql/status/pause.sql).
   */
  processing: boolean;
  fields: Fields;
}

/** One thing wrong with the configuration; `text` starts with the variable's name. */

export class ConfigError extends Error {
  override name = "ConfigError";
  readonly problems: ConfigProblem[];
  constructor(problems: ConfigProblem[]) {
    super(`invalid configuration:\n  ${problems.map((p) => p.text).join("\n  ")}`);
    this.problems = problems;
  }
}

/** Field names the sandbox portal uses when none are configured. */
export const SANDBOX_FIELDS = {
  userId: "UF_CRM_1785934432398",
  registered: "UF_CRM_1778692456",
  citizenship: "UF_CRM_1768493029",
} as const;

/**
 * Portal identity the sandbox uses when none is configured: robot webhooks sent by the emulator
 * carry these as `auth[domain]` and `auth[member_id]` (§10.1). `.test` is a reserved TLD.
 */
export const SANDBOX_PORTAL_HOST = "sandbox-portal.bitrix24.test";
export const SANDBOX_MEMBER_ID = "sandbox0000000000000000000000000";

const WEBHOOK = "BITRIX_SYNC_CRM_REST_WEBHOOK_URL";

/**
 * Sandbox mode fails closed. It processes the configured database's intents against the emulator
 * and writes emulator Contact IDs into the mappings, so a deployment that lost its webhook secret
 * file must stop, not fall back to it: without the webhook URL the service runs in sandbox mode only
 * on the embedded database, or with BITRIX_SYNC_SANDBOX=true (on a database the sandbox created,
 * checked at start by src/startup/sandbox-database.ts). Never with sync enabled.
 */
function sandboxProblems(env: Env, secrets: Secrets, secretEnv: NodeJS.ProcessEnv): ConfigProblem[] {
  const flag = env.BITRIX_SYNC_SANDBOX;
  if (secrets[WEBHOOK] !== undefined) {
    return flag === true
      ? [
          {
            variable: "BITRIX_SYNC_SANDBOX",
            kind: "invalid",
            text: `BITRIX_SYNC_SANDBOX=true but ${WEBHOOK} is configured: remove one of them (sandbox mode never calls a real portal)`,
          },
        ]
      : [];
  }
  const missing = `secret ${WEBHOOK} is missing (${secretLocation(WEBHOOK, secretEnv)})`;
  if (env.BITRIX_SYNC_ENABLED === true) {
    return [
      {
        variable: "BITRIX_SYNC_ENABLED",
        kind: "invalid",
        text: `BITRIX_SYNC_ENABLED=true but ${WEBHOOK} is not configured: sandbox mode is refused when sync is enabled`,
      },
    ];
  }
  if (flag === false) {
    return [
      {
        variable: WEBHOOK,
        kind: "secret_missing",
        text: `${missing} and BITRIX_SYNC_SANDBOX=false: provide the secret, then start again.`,
      },
    ];
  }
  if (flag === undefined && secrets.BITRIX_SYNC_DATABASE_URL !== undefined) {
    return [
      {
        variable: WEBHOOK,
        kind: "secret_missing",
        text: `${missing} while BITRIX_SYNC_DATABASE_URL names a database: sandbox mode runs only on the embedded database, never on a configured one; provide the secret (or, for a throw-away sandbox database, set BITRIX_SYNC_SANDBOX=true and name a database that does not exist yet), then start again.`,
      },
    ];
  }
  return [];
}

/** Validates the environment alone (no secrets read). Throws ConfigError listing every problem. */
export function parseEnv(rawEnv: NodeJS.ProcessEnv = process.env): Env {
  const parsed = EnvSchema.safeParse(rawEnv);
  if (!parsed.success) {
    throw new ConfigError(
      parsed.error.issues.map((i) => {
        const variable = i.path.join(".");
        return { variable, kind: "invalid", text: `${variable}: ${i.message}` };
      }),
    );
  }
  return parsed.data;
}

/** Parses and cross-checks the environment. Throws ConfigError listing every problem. */
export function loadConfig(rawEnv: NodeJS.ProcessEnv = process.env): Config {
  const env = parseEnv(rawEnv);
  const secretEnv = { ...rawEnv, SECRETS_SOURCE: env.SECRETS_SOURCE === "env" ? "env" : "file" };
  const secrets = loadSecrets(secretEnv);
  const problems: ConfigProblem[] = [];
  const invalid = (variable: string, text: string) => problems.push({ variable, kind: "invalid", text });
  const sandbox = secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL === undefined;
  problems.push(...sandboxProblems(env, secrets, secretEnv));
  if (env.BITRIX_SYNC_ENABLED === true && env.SECRETS_SOURCE === "env") {
    invalid(
      "SECRETS_SOURCE",
      "SECRETS_SOURCE=env is for local use only and is refused when BITRIX_SYNC_ENABLED=true: put the secrets in files in BITRIX_SYNC_SECRETS_DIR (SECRETS_SOURCE=file)",
    );
  }
  if (env.BITRIX_SYNC_ENABLED === true) {
    for (const k of [
      "BITRIX_SYNC_CONTACT_USER_ID_FIELD",
      "BITRIX_SYNC_CONTACT_REGISTERED_FIELD",
      "BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD",
      "BITRIX_SYNC_PORTAL_HOST",
      "BITRIX_SYNC_PORTAL_MEMBER_ID",
    ] as const) {
      if (env[k] === undefined) invalid(k, `${k}: required when BITRIX_SYNC_ENABLED=true`);
    }
    for (const k of [
      "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN",
      "BITRIX_SYNC_ALERT_RECEIVER_TOKEN",
      "BITRIX_SYNC_SERVICE_TOKEN",
      "BITRIX_SYNC_HASH_KEY",
    ] as const) {
      if (secrets[k] === undefined) {
        problems.push({
          variable: k,
          kind: "secret_missing",
          text: `secret ${k} is required when BITRIX_SYNC_ENABLED=true, but ${secretLocation(k, secretEnv)} is missing: provide it, or set BITRIX_SYNC_ENABLED=false, then start again.`,
        });
      }
    }
  }
  problems.push(...tokenProblems(secrets));
  if (!sandbox && env.BITRIX_SYNC_PORTAL_HOST === undefined) {
    invalid(
      "BITRIX_SYNC_PORTAL_HOST",
      "BITRIX_SYNC_PORTAL_HOST: required when a CRM webhook URL is configured",
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);

  const userId = env.BITRIX_SYNC_CONTACT_USER_ID_FIELD ?? SANDBOX_FIELDS.userId;
  const registered = env.BITRIX_SYNC_CONTACT_REGISTERED_FIELD ?? SANDBOX_FIELDS.registered;
  const citizenship = env.BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD ?? SANDBOX_FIELDS.citizenship;
  const fields: Fields = {
    userId,
    registered,
    citizenship,
    rest: {
      userId: toRestFieldName(userId),
      registered: toRestFieldName(registered),
      citizenship: toRestFieldName(citizenship),
    },
  };
  // The deployment's master switch, decided here once: a change takes effect at the next start only.
  const processing = sandbox ? env.BITRIX_SYNC_ENABLED !== false : env.BITRIX_SYNC_ENABLED === true;
  return { env, secrets, sandbox, processing, fields };
}
