// What of a PostgreSQL error may be looked at and logged: its SQLSTATE (a refusal such as BS001 is
// handled by code), never its message, which may quote data.

/** The error's code as given: a SQLSTATE, or a Node.js code such as ECONNREFUSED. */
function codeOf(e: unknown): string | undefined {
  return typeof e === "object" && e !== null && "code" in e
    ? String((e as { code: unknown }).code)
    : undefined;
}

/** The error's SQLSTATE (five characters, e.g. BS001 or 57P01), when it has one. */
export function sqlstate(e: unknown): string | undefined {
  const c = codeOf(e);
  return c !== undefined && /^[0-9A-Z]{5}$/.test(c) ? c : undefined;
}

/**
 * The error's SQLSTATE, or its Node.js error code (a refused or reset connection), and its class
 * name: safe to log (messages may quote data).
 */
export function safeError(e: unknown): { sqlstate?: string; code?: string; errorName: string } {
  const s = sqlstate(e);
  const c = s === undefined ? codeOf(e) : undefined;
  return {
    ...(s ? { sqlstate: s } : {}),
    ...(c && /^E[A-Z0-9_]{2,40}$/.test(c) ? { code: c } : {}),
    errorName: e instanceof Error ? e.name : typeof e,
  };
}

/**
 * What a crash line says about the error: its class, a SQLSTATE or a Node.js error code, and where
 * it was thrown (the stack's frames: code locations only). Never its message, which can quote
 * values or a connection string.
 */
export function crashFields(e: unknown): {
  errorName: string;
  sqlstate?: string;
  code?: string;
  frames?: string[];
} {
  const out: { errorName: string; sqlstate?: string; code?: string; frames?: string[] } = safeError(e);
  const code = (e as { code?: unknown } | null)?.code;
  if (out.sqlstate === undefined && typeof code === "string" && /^[A-Z][A-Z0-9_]{1,40}$/.test(code)) {
    out.code = code;
  }
  const stack = e instanceof Error && typeof e.stack === "string" ? e.stack : "";
  const frames = stack
    .split("\n")
    .filter((l) => /^\s+at /.test(l))
    .slice(0, 8)
    .map((l) => l.trim().replace(/^at /, "").slice(0, 200));
  if (frames.length > 0) out.frames = frames;
  return out;
}

/** A database connection that failed or went away, as opposed to a statement's own error. */
const CONNECTION_LOST = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EPIPE",
  "57P01", // admin_shutdown: the backend was terminated
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: the server is starting or stopping
  "08000",
  "08001",
  "08003",
  "08004",
  "08006",
]);

/** True for an error of a lost or refused database connection (see CONNECTION_LOST). */
export function isConnectionLost(e: unknown): boolean {
  const c = codeOf(e);
  if (c !== undefined && CONNECTION_LOST.has(c)) return true;
  // node-postgres' own errors for a connection that ended carry no code.
  return e instanceof Error && /^Connection terminated/.test(e.message);
}

/**
 * A server that answers but takes no write (25006 read_only_sql_transaction): a primary fenced
 * read-only before a failover, or a standby behind the database's name (docs/runbook.md, "After a
 * database failover").
 */
export function isWriteRefused(e: unknown): boolean {
  return codeOf(e) === "25006";
}

/**
 * graphile-worker 0.17.3 records a finished job without awaiting it (worker.ts calls completeJob
 * and failJob and moves on), and does not retry a refused or lost connection: when the database is
 * away at that moment, or refuses writes (a fenced primary during a failover), the rejection is
 * unhandled. Nothing of the service is lost with it: the job
 * row stays locked until graphile-worker's lock expiry, the crontab starts the next run meanwhile,
 * and the sync loop's own state is in its leased rows. True for exactly that rejection: a lost
 * connection or a refused write whose stack runs through graphile-worker's job completion or failure.
 */
export function isJobBookkeepingLoss(e: unknown): boolean {
  if (!(e instanceof Error) || !(isConnectionLost(e) || isWriteRefused(e))) return false;
  return /graphile-worker[\\/].*\b(completeJobs|failJobs)\b/.test(e.stack ?? "");
}

/**
 * The refusal PostgreSQL gives, with row_security off (every service connection and every security
 * definer function that reads the App's tables), to a statement a row-security policy would apply
 * to: someone put row security on a table the service reads, usually the App's owner on its own
 * (docs/security.md, "The App's tables"). Told apart from other 42501s by the message, which is
 * looked at here and never logged.
 */
export function isRowSecurityRefusal(e: unknown): boolean {
  return sqlstate(e) === "42501" && e instanceof Error && /row-level security/i.test(e.message);
}

/**
 * The code a failure is recorded and logged under: `app_row_security` for a row-security refusal
 * (isRowSecurityRefusal), otherwise `fallback`.
 */
export function failureCode(e: unknown, fallback: string): string {
  return isRowSecurityRefusal(e) ? "app_row_security" : fallback;
}
