// Preflight, configuration and secrets: the service's own validation (src/config/env.ts) as it runs
// now and as it would run with BITRIX_SYNC_ENABLED=true, the secret files' modes, and the variables
// of the stub era (§12.2, §17) that must not be carried over.
import { lstatSync } from "node:fs";
import { join } from "node:path";
import { type Config, ConfigError, loadConfig, parseEnv } from "../config/env.js";
import { DEFAULT_SECRETS_DIR, OPTIONAL_SECRET_NAMES, SECRET_NAMES, SecretError } from "../config/secrets.js";
import { parseWebhookUrl } from "../crm/client.js";
import { CrmConfigError } from "../crm/redact.js";
import { type CheckResult, check } from "./types.js";

/**
 * Variables of the stub-era deployment that full mode does not read (§12.2): their presence means
 * an old .env or compose file was carried over.
 */
export const STUB_ERA_VARIABLE =
  /^(BITRIX_SYNC_CRM_BASE_URL|BITRIX_SYNC_CRM_MAX_CONCURRENCY|(BITRIX_SYNC_)?CONTACT_\w*_INTERVAL_SEC)$/;

function problemsOf(e: unknown): string[] | null {
  if (e instanceof ConfigError) return e.problems.map((p) => p.text);
  if (e instanceof SecretError || e instanceof CrmConfigError) return [e.message];
  return null;
}

/** Loads the configuration as the service does, plus the webhook URL's rules (§12.2, §16). */
function load(raw: NodeJS.ProcessEnv): { config: Config } | { problems: string[] } {
  try {
    const config = loadConfig(raw);
    if (!config.sandbox) {
      parseWebhookUrl(
        config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL as string,
        config.env.BITRIX_SYNC_PORTAL_HOST as string,
      );
    }
    return { config };
  } catch (e) {
    const problems = problemsOf(e);
    if (problems === null) throw e;
    return { problems };
  }
}

export interface ConfigChecks {
  /** The service's configuration, or null when it cannot be loaded (nothing else can be checked). */
  config: Config | null;
  results: CheckResult[];
}

export function checkConfiguration(raw: NodeJS.ProcessEnv): ConfigChecks {
  const results: CheckResult[] = [];
  const loaded = load(raw);
  let config: Config | null = null;
  if ("problems" in loaded) {
    results.push(
      check(
        "config.variables",
        "fail",
        `the service would not start: ${loaded.problems.join("; ")}`,
        "fix the variables and secret files named (docs/configuration.md), then run preflight again",
      ),
    );
  } else {
    config = loaded.config;
    // Preflight runs before enabling (§17 step 7): what enabling will demand must hold already.
    const enabled = config.env.BITRIX_SYNC_ENABLED === true;
    const asEnabled = enabled ? loaded : load({ ...raw, BITRIX_SYNC_ENABLED: "true" });
    if ("problems" in asEnabled) {
      results.push(
        check(
          "config.variables",
          "fail",
          `valid while disabled, but BITRIX_SYNC_ENABLED=true would be refused: ${asEnabled.problems.join("; ")}`,
          "set what is named before enabling sync (docs/configuration.md)",
        ),
      );
    } else {
      results.push(
        check(
          "config.variables",
          "ok",
          `every variable and secret valid${enabled ? "" : " (also with BITRIX_SYNC_ENABLED=true)"}; portal ${config.env.BITRIX_SYNC_PORTAL_HOST ?? "(sandbox)"}`,
        ),
      );
    }
  }
  results.push(checkSecretFiles(raw));
  results.push(checkStubEra(raw));
  return { config, results };
}

/**
 * Secret files must be readable by the service's user only (§16: "service-specific"): no group or
 * other permission bit. Only names appear in the result, never a value.
 */
function checkSecretFiles(raw: NodeJS.ProcessEnv): CheckResult {
  let source: string;
  try {
    source = parseEnv(raw).SECRETS_SOURCE;
  } catch {
    source = raw.SECRETS_SOURCE ?? "selectel";
  }
  if (source === "env") {
    return check(
      "config.secret_files",
      "warn",
      "SECRETS_SOURCE=env: the secrets come from the environment (local use only; refused when enabled)",
      "deliver the secrets as files in BITRIX_SYNC_SECRETS_DIR (SECRETS_SOURCE=file or selectel)",
    );
  }
  const dir = raw.BITRIX_SYNC_SECRETS_DIR ?? DEFAULT_SECRETS_DIR;
  const open: string[] = [];
  const notFiles: string[] = [];
  let found = 0;
  for (const name of [...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES]) {
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(join(dir, name));
    } catch {
      continue;
    }
    found++;
    if (!st.isFile()) notFiles.push(name);
    else if ((st.mode & 0o077) !== 0)
      open.push(`${name} (mode ${(st.mode & 0o777).toString(8).padStart(4, "0")})`);
  }
  if (open.length > 0 || notFiles.length > 0) {
    const parts = [];
    if (open.length > 0) parts.push(`readable beyond the service's user: ${open.join(", ")}`);
    if (notFiles.length > 0) parts.push(`not regular files: ${notFiles.join(", ")}`);
    return check(
      "config.secret_files",
      "fail",
      `secret files in ${dir} ${parts.join("; ")}`,
      "chmod 0400 each secret file and chown it to the service's user (docs/deployment.md, step 3)",
    );
  }
  if (found === 0) {
    return check(
      "config.secret_files",
      "warn",
      `no secret file in ${dir}`,
      "write one file per secret there (deploy/config.example.json names them)",
    );
  }
  return check(
    "config.secret_files",
    "ok",
    `${found} secret file(s) in ${dir}, none group- or world-readable`,
  );
}

export function checkStubEra(raw: NodeJS.ProcessEnv): CheckResult {
  const left = Object.keys(raw)
    .filter((k) => STUB_ERA_VARIABLE.test(k))
    .sort();
  if (left.length > 0) {
    return check(
      "config.stub_era",
      "fail",
      `stub-era variables still set: ${left.join(", ")}`,
      "remove them: full mode does not read them (§12.2); .env.example lists what it does read",
    );
  }
  return check("config.stub_era", "ok", "no stub-era variable set");
}
