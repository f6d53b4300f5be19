import test from "ava";
import fc from "fast-check";
import {
  attemptsSpent,
  backoffCeilingMs,
  backoffDelayMs,
  LANE_LEAD,
  type RetrySettings,
  retryDelayMs,
} from "../../../src/crm/backoff.js";
import { testSettings } from "../../helpers/settings.js";

/** The catalogue's defaults (§9): base 1 s, cap 5 min, horizon 24 h. */
const S: RetrySettings = testSettings().retry;

test("the ceiling doubles from the base and stops at the cap", (t) => {
  t.is(backoffCeilingMs(0, S), 1000);
  t.is(backoffCeilingMs(1, S), 2000);
  t.is(backoffCeilingMs(5, S), 32_000);
  t.is(backoffCeilingMs(8, S), 256_000);
  t.is(backoffCeilingMs(9, S), 300_000);
  t.is(backoffCeilingMs(10_000, S), 300_000);
  t.is(backoffCeilingMs(-3, S), 1000, "a negative attempt counts as the first");
});

test("full jitter: every delay is a whole number in [0, min(max, base * 2^attempt)]", (t) => {
  t.notThrows(() =>
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 200 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (attempt, r) => {
          const d = retryDelayMs(attempt, S, undefined, () => r);
          return Number.isInteger(d) && d >= 0 && d <= Math.min(S.maxMs, S.baseMs * 2 ** attempt);
        },
      ),
    ),
  );
});

test("full jitter reaches both ends of its range", (t) => {
  t.is(
    retryDelayMs(3, S, undefined, () => 0),
    0,
  );
  t.is(
    retryDelayMs(3, S, undefined, () => 0.999_999_999),
    8000,
  );
});

test("delays really are spread out (not a fixed exponential)", (t) => {
  const seen = new Set<number>();
  for (let i = 0; i < 50; i++) seen.add(retryDelayMs(6, S));
  t.true(seen.size > 10);
});

test("a portal-given delay wins over the jittered one, rounded up to whole ms", (t) => {
  t.is(
    retryDelayMs(0, S, 90_000.4, () => 0),
    90_001,
  );
  t.is(
    retryDelayMs(0, S, 600_000, () => 0),
    600_000,
    "even above retry.max_ms: the portal knows best",
  );
});

test("a zero or negative portal delay falls back to the jitter", (t) => {
  t.is(
    retryDelayMs(2, S, 0, () => 0.5),
    2000,
  );
  t.is(
    retryDelayMs(2, S, -5, () => 0.5),
    2000,
  );
});

test("no horizon here: a delay is returned however late the attempt (SQL decides to give up)", (t) => {
  t.is(
    retryDelayMs(10_000, S, undefined, () => 0.999_999_999),
    300_000,
  );
});

test("one count and one call: the first retry waits up to the base, intake's and a step's up to twice it", (t) => {
  const top = () => 0.999_999_999;
  const first = (spent: number) => backoffDelayMs(spent, S, undefined, top);
  // A command, an event, an alert command: the failed send is the first attempt spent.
  t.is(first(attemptsSpent({ attempt_count: 1, limit_hits: 0 })), backoffCeilingMs(0, S));
  // Limit refusals are not attempts: two refusals and one failure are still the first retry.
  t.is(first(attemptsSpent({ attempt_count: 3, limit_hits: 2 })), backoffCeilingMs(0, S));
  // Intake and the step lane, as released: one doubling ahead.
  t.is(first(attemptsSpent({ attempt_count: 1 }) + LANE_LEAD), backoffCeilingMs(1, S));
  t.is(backoffDelayMs(0, S, undefined, top), backoffCeilingMs(0, S), "never below the first");
  t.is(backoffDelayMs(3, S, 1234.2), 1235, "a portal-given delay wins");
});
