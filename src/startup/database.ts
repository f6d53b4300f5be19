// The database check at startup: one connection and `select 1` before migrations, so an unreachable
// or misconfigured database stops the service with a line naming host:port, the cause and the fix.
import pg from "pg";
import { withSearchPath } from "../db/search-path.js";
import { databaseAddress } from "../db/url.js";
import { EXIT, StartupError } from "./errors.js";

const UNREACHABLE: Record<string, string> = {
  ECONNREFUSED: "connection refused: nothing listens there",
  ECONNRESET: "the connection was reset",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ENOTFOUND: "the host name does not resolve",
  EAI_AGAIN: "the host name does not resolve (DNS temporarily unavailable)",
  ETIMEDOUT: "no answer in time",
  "57P03": "the server is starting up or shutting down",
};

/** Classifies a connection failure to `url` (only codes and host:port are used, never the message). */
export function databaseStartupError(url: string, e: unknown, timeoutMs: number): StartupError {
  const at = databaseAddress(url);
  const code = (e as { code?: unknown }).code;
  const c = typeof code === "string" ? code : undefined;
  if (c === "28P01" || c === "28000") {
    return new StartupError("database_refused", EXIT.config, [
      `the database at ${at} refused the user name or password in BITRIX_SYNC_DATABASE_URL (SQLSTATE ${c}): fix that secret, then start again.`,
    ]);
  }
  if (c === "3D000") {
    return new StartupError("database_refused", EXIT.config, [
      `the database named in BITRIX_SYNC_DATABASE_URL does not exist on ${at}: create it or fix that secret, then start again.`,
    ]);
  }
  const timedOut =
    c === undefined && e instanceof Error && /timeout/i.test(e.message)
      ? `no answer within ${Math.round(timeoutMs / 1000)} s`
      : undefined;
  const why = (c && UNREACHABLE[c]) ?? timedOut ?? `connection failed${c ? ` (${c})` : ""}`;
  return new StartupError("database_unreachable", EXIT.unavailable, [
    `the database at ${at} is unreachable (${why}): start PostgreSQL there, or fix the host and port in BITRIX_SYNC_DATABASE_URL, then start again.`,
  ]);
}

/**
 * A server that takes no write: a standby, or a primary fenced read-only during a failover
 * (docs/runbook.md, "After a database failover"). Unavailable, not misconfigured: the same name
 * points at a writable server once the failover is done, and a restart then succeeds.
 */
export function readOnlyStartupError(url: string): StartupError {
  return new StartupError("database_unreachable", EXIT.unavailable, [
    `the database at ${databaseAddress(url)} takes no writes (a standby, or a primary made read-only for a failover; SQLSTATE 25006): point BITRIX_SYNC_DATABASE_URL at the primary, or start again once the failover has moved the name.`,
  ]);
}

/**
 * Connects once and asks whether the server takes writes; throws a StartupError saying what is
 * wrong.
 */
export async function checkDatabase(url: string, timeoutMs = 10_000): Promise<void> {
  const client = new pg.Client({ connectionString: withSearchPath(url), connectionTimeoutMillis: timeoutMs });
  client.on("error", () => undefined);
  try {
    await client.connect();
    const { rows } = await client.query<{ ro: boolean }>(
      "select current_setting('transaction_read_only') = 'on' as ro",
    );
    if (rows[0]?.ro) throw readOnlyStartupError(url);
  } catch (e) {
    if (e instanceof StartupError) throw e;
    throw databaseStartupError(url, e, timeoutMs);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The startup error for a failure while migrating at start (BITRIX_SYNC_MIGRATE_ON_START): a user
 * without DDL rights, or the database going away after the check. Null when it is neither.
 */
export function migrationStartupError(url: string, e: unknown): StartupError | null {
  const code = (e as { code?: unknown }).code;
  if (code === "42501") {
    return new StartupError("database_refused", EXIT.config, [
      `the database user of BITRIX_SYNC_DATABASE_URL may not apply the migrations (SQLSTATE 42501) at ${databaseAddress(url)}: run them as the schema owner (npm run db:migrate) and start with BITRIX_SYNC_MIGRATE_ON_START=false.`,
    ]);
  }
  if (typeof code === "string" && code in UNREACHABLE) return databaseStartupError(url, e, 0);
  return null;
}
