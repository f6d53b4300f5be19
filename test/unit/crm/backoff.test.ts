import test from "ava";
import fc from "fast-check";
import { backoffCeilingMs, nextRetry, type RetrySettings } from "../../../src/crm/backoff.js";
import { testSettings } from "../../helpers/settings.js";

/** The catalogue's defaults (§9): base 1 s, cap 5 min, horizon 24 h. */
const S: RetrySettings = testSettings().retry;
const T0 = 1_800_000_000_000;

test("the ceiling doubles from the base and stops at the cap", (t) => {
  t.is(backoffCeilingMs(0, S), 1000);
  t.is(backoffCeilingMs(1, S), 2000);
  t.is(backoffCeilingMs(5, S), 32_000);
  t.is(backoffCeilingMs(8, S), 256_000);
  t.is(backoffCeilingMs(9, S), 300_000);
  t.is(backoffCeilingMs(10_000, S), 300_000);
});

test("full jitter: every delay lies in [0, min(max, base * 2^attempt)]", (t) => {
  t.notThrows(() =>
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 200 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (attempt, r) => {
          const d = nextRetry({ attempt, firstAttemptAt: T0, now: T0, random: () => r }, S);
          if (!d.retry) return false;
          return (
            d.delayMs >= 0 &&
            d.delayMs <= Math.min(S.maxMs, S.baseMs * 2 ** attempt) &&
            d.retryAt === T0 + d.delayMs
          );
        },
      ),
    ),
  );
});

test("full jitter reaches both ends of its range", (t) => {
  const low = nextRetry({ attempt: 3, firstAttemptAt: T0, now: T0, random: () => 0 }, S);
  const high = nextRetry({ attempt: 3, firstAttemptAt: T0, now: T0, random: () => 0.999_999_999 }, S);
  t.deepEqual(low.retry && low.delayMs, 0);
  t.deepEqual(high.retry && high.delayMs, 8000);
});

test("delays really are spread out (not a fixed exponential)", (t) => {
  const seen = new Set<number>();
  for (let i = 0; i < 50; i++) {
    const d = nextRetry({ attempt: 6, firstAttemptAt: T0, now: T0 }, S);
    if (d.retry) seen.add(d.delayMs);
  }
  t.true(seen.size > 10);
});

test("a portal-given delay wins over the jittered one", (t) => {
  const d = nextRetry(
    { attempt: 0, firstAttemptAt: T0, now: T0, retryAfterMs: 90_000.4, random: () => 0 },
    S,
  );
  t.true(d.retry);
  if (d.retry) t.is(d.delayMs, 90_001);
});

test("the horizon: a retry that would land after first attempt + 24 h is refused", (t) => {
  const nearEnd = T0 + 86_400_000 - 10_000;
  const ok = nextRetry({ attempt: 20, firstAttemptAt: T0, now: nearEnd, random: () => 0.01 }, S);
  t.true(ok.retry, "3 s of jitter still fits");
  const late = nextRetry({ attempt: 20, firstAttemptAt: T0, now: nearEnd, random: () => 0.5 }, S);
  t.deepEqual(late, { retry: false, reason: "horizon_exhausted", deadline: T0 + 86_400_000 });
  const past = nextRetry({ attempt: 0, firstAttemptAt: T0, now: T0 + 86_400_001, random: () => 0 }, S);
  t.false(past.retry);
  const hinted = nextRetry({ attempt: 0, firstAttemptAt: T0, now: nearEnd, retryAfterMs: 60_000 }, S);
  t.false(hinted.retry, "a portal delay past the horizon also ends retrying");
});

test("the horizon is exactly inclusive at its deadline", (t) => {
  const d = nextRetry({ attempt: 0, firstAttemptAt: T0, now: T0 + 86_400_000, random: () => 0 }, S);
  t.true(d.retry);
});
