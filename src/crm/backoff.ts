// Retry timing (§9): exponential backoff with full jitter, a portal-given delay (operating_reset_at,
// a limit refusal) taking precedence, and a horizon of 24 h from the first attempt after which the
// command goes to the technical dead-letter queue instead of being rescheduled.

export interface RetrySettings {
  /** Base of the exponential, ms (setting retry.base_ms, default 1000). */
  baseMs: number;
  /** Cap of one delay, ms (setting retry.max_ms, default 300000). */
  maxMs: number;
  /** Give up this long after the first attempt, seconds (setting retry.horizon_sec, default 86400). */
  horizonSec: number;
}

export interface RetryInput {
  /** Attempts already spent that count (limit refusals do not); 0 before the first retry. */
  attempt: number;
  /** When the command was first attempted (epoch ms). */
  firstAttemptAt: number;
  /** Now (epoch ms). */
  now: number;
  /** A delay the portal asked for; used instead of the jittered delay when larger than zero. */
  retryAfterMs?: number;
  /** Uniform random in [0, 1); injectable for tests. */
  random?: () => number;
}

/** Either the next attempt time, or the signal that the horizon is exhausted (technical DLQ). */
export type RetryDecision =
  | { retry: true; delayMs: number; retryAt: number }
  | { retry: false; reason: "horizon_exhausted"; deadline: number };

/** Upper bound of the jittered delay for an attempt: min(max, base * 2^attempt). */
export function backoffCeilingMs(attempt: number, s: RetrySettings): number {
  const exp = Math.min(Math.max(attempt, 0), 52); // 2^53 overflows integer precision
  return Math.min(s.maxMs, s.baseMs * 2 ** exp);
}

/**
 * Full jitter: a uniform delay in [0, min(max, base * 2^attempt)]. A positive `retryAfterMs` wins.
 * Returns `retry: false` when the next attempt would fall after firstAttemptAt + horizon.
 */
export function nextRetry(input: RetryInput, s: RetrySettings): RetryDecision {
  const deadline = input.firstAttemptAt + s.horizonSec * 1000;
  const random = input.random ?? Math.random;
  const delayMs =
    input.retryAfterMs !== undefined && input.retryAfterMs > 0
      ? Math.ceil(input.retryAfterMs)
      : Math.floor(random() * (backoffCeilingMs(input.attempt, s) + 1));
  const retryAt = input.now + delayMs;
  if (retryAt > deadline) return { retry: false, reason: "horizon_exhausted", deadline };
  return { retry: true, delayMs, retryAt };
}
