// Retry timing (§9): exponential backoff with full jitter, a portal-given delay (operating_reset_at,
// a limit refusal) taking precedence. This is only the delay: whether a retry still fits the
// horizon of 24 h from the first attempt is decided in SQL by the retry function each lane calls
// (retry_sync_task, schedule_workflow_retry, retry_command, retry_webhook; sql/retry/deadline.sql), which
// dead-letters the row itself and returns what it did.

export interface RetrySettings {
  /** Base of the exponential, ms (setting retry.base_ms, default 1000). */
  baseMs: number;
  /** Cap of one delay, ms (setting retry.max_ms, default 300000). */
  maxMs: number;
  /** retry.horizon_sec: read by SQL (bitrix_sync._retry_deadline), never by the TypeScript lanes. */
  horizonSec: number;
}

/**
 * The attempts a row has spent that count towards its backoff: every send or try, less the limit
 * refusals (QUERY_LIMIT_EXCEEDED, OPERATION_TIME_LIMIT, a bare 429), which the portal refused before
 * executing and which spend no attempt (§9). The one count every retrying lane uses.
 */
export function attemptsSpent(row: { attempt_count: number; limit_hits?: number | null }): number {
  return Math.max(0, row.attempt_count - (row.limit_hits ?? 0));
}

/**
 * The delay before the next try of a row that failed after spending `spent` attempts (the failed one
 * included; attemptsSpent), in ms: full jitter over min(max, base * 2^(spent - 1)), so the first retry
 * waits up to retry.base_ms. A positive `retryAfterMs` the portal asked for wins. The one backoff
 * call of every retrying lane (intake, workflow steps and their unanswered writes, the pump, the
 * webhook inbox, the alert lane).
 */
export function backoffDelayMs(
  spent: number,
  s: Pick<RetrySettings, "baseMs" | "maxMs">,
  retryAfterMs?: number,
  random: () => number = Math.random,
): number {
  return retryDelayMs(Math.max(0, spent - 1), s, retryAfterMs, random);
}

/**
 * Intake (a failed intent) and the step lane (a step that threw) count the failed try one doubling
 * ahead of the other lanes: their first retry waits up to 2 × retry.base_ms. Kept as released; named
 * here so no lane counts its own way.
 */
export const LANE_LEAD = 1;

/** Upper bound of the jittered delay for an attempt: min(max, base * 2^attempt). */
export function backoffCeilingMs(attempt: number, s: Pick<RetrySettings, "baseMs" | "maxMs">): number {
  const exp = Math.min(Math.max(attempt, 0), 52); // 2^53 overflows integer precision
  return Math.min(s.maxMs, s.baseMs * 2 ** exp);
}

/**
 * The delay before the next attempt, in ms: full jitter, a uniform delay in
 * [0, min(max, base * 2^attempt)], where `attempt` counts the attempts already spent that count
 * (0 before the first retry). A positive `retryAfterMs` the portal asked for wins. `random` is
 * uniform in [0, 1) and injectable for tests. Every retrying lane gets its delay here.
 */
export function retryDelayMs(
  attempt: number,
  s: Pick<RetrySettings, "baseMs" | "maxMs">,
  retryAfterMs?: number,
  random: () => number = Math.random,
): number {
  if (retryAfterMs !== undefined && retryAfterMs > 0) return Math.ceil(retryAfterMs);
  return Math.floor(random() * (backoffCeilingMs(attempt, s) + 1));
}
