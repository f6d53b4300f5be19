// Deadlines for the answers the HTTP endpoints give about the database, and the one place that says
// whether a database failure was a timeout or an unreachable server. The pools' own timeouts
// (src/db/pools.ts) end the statements; this is the endpoint's promise to answer in bounded time
// even when several of them queue one after another.

/** A deadline passed before the work finished (the work itself may still end later). */
class DeadlineError extends Error {
  override name = "DeadlineError";
  readonly code = "deadline";
}

/** `work`, or a DeadlineError after `ms`, whichever comes first. */
export async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(`no answer within ${ms} ms`)), ms);
    timer.unref();
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
    // A late failure of `work` is expected and must not surface as an unhandled rejection.
    work.catch(() => undefined);
  }
}

/** SQLSTATEs of a statement ended by statement_timeout (57014) or lock_timeout (55P03). */
const TIMEOUT_SQLSTATES = new Set(["57014", "55P03"]);

/** True when `e` is a timeout: ours, the server's, or pg's (pool wait, connect, query backstop). */
export function isTimeout(e: unknown): boolean {
  if (e instanceof DeadlineError) return true;
  const code = (e as { code?: unknown }).code;
  if (typeof code === "string") return TIMEOUT_SQLSTATES.has(code) || code === "ETIMEDOUT";
  // pg and pg-pool signal their own timeouts with messages only; the message is matched, never shown.
  return e instanceof Error && /timeout|timed out/i.test(e.message);
}

/** The safe code of a failed database check: `database_timeout` or `database_unreachable`. */
export function databaseProblem(e: unknown): "database_timeout" | "database_unreachable" {
  return isTimeout(e) ? "database_timeout" : "database_unreachable";
}
