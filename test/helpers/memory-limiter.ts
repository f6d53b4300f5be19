// The CRM limiter's rules (token bucket, in-flight cap, rate cut and recovery, method blocks) kept
// in process memory, for tests that need a limiter but no shared PostgreSQL bucket. The service
// always uses the PostgreSQL limiter (src/crm/limiter.ts); this one is correct for one process only.
import {
  type AdaptiveSettings,
  type CrmLimiter,
  DEFAULT_ADAPTIVE,
  type LimiterSettings,
  type SettingsSource,
} from "../../src/crm/limiter.js";

function read(s: SettingsSource): LimiterSettings {
  return typeof s === "function" ? s() : s;
}

function aborted(): Error {
  return Object.assign(new Error("waiting for the CRM limiter was aborted"), { name: "AbortError" });
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(aborted());
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(aborted());
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export interface MemoryLimiterOptions {
  settings: SettingsSource;
  adaptive?: Partial<AdaptiveSettings>;
  now?: () => number;
  maxPollMs?: number;
}

/** A limiter in process memory with the PostgreSQL limiter's rules. */
export function createMemoryLimiter(opts: MemoryLimiterOptions): CrmLimiter {
  const adaptive = { ...DEFAULT_ADAPTIVE, ...opts.adaptive };
  const now = opts.now ?? Date.now;
  const maxPoll = opts.maxPollMs ?? 250;
  let tokens = read(opts.settings).burst;
  let refilledAt = now();
  let factor = 1;
  let factorAt = now();
  let throttledUntil = 0;
  let inFlight = 0;
  const blocks = new Map<string, number>();
  const resets = new Map<string, number>();

  function advance(): { rate: number; s: LimiterSettings } {
    const s = read(opts.settings);
    const t = now();
    factor = Math.min(1, factor + (adaptive.recoveryPerSec * (t - factorAt)) / 1000);
    factorAt = t;
    const rate = s.refillPerSec * factor;
    tokens = Math.min(s.burst, tokens + (rate * Math.max(0, t - refilledAt)) / 1000);
    refilledAt = t;
    return { rate, s };
  }

  function tryAcquire(): number | null {
    const { rate, s } = advance();
    const t = now();
    if (throttledUntil > t) return throttledUntil - t;
    if (inFlight >= s.maxInFlight) return 20;
    if (tokens < 1) return Math.ceil(((1 - tokens) / rate) * 1000);
    tokens -= 1;
    inFlight++;
    return null;
  }

  return {
    async acquire(a = {}) {
      for (;;) {
        if (a.signal?.aborted) throw aborted();
        const wait = tryAcquire();
        if (wait === null) {
          let released = false;
          return {
            grantedAt: now(),
            async release() {
              if (released) return;
              released = true;
              inFlight--;
            },
          };
        }
        await sleep(Math.min(Math.max(wait, 1), maxPoll), a.signal);
      }
    },
    async noteRateLimited() {
      advance();
      const t = now();
      if (throttledUntil > t) return;
      factor = Math.max(adaptive.minFactor, factor * adaptive.decrease);
      tokens = 0;
      throttledUntil = t + adaptive.cooldownMs;
    },
    async noteMethodBlocked(method, until) {
      const t = now();
      const reset = resets.get(method);
      const end = Math.max(until, blocks.get(method) ?? 0, reset !== undefined && reset > t ? reset : 0);
      blocks.set(method, end);
      return end;
    },
    async noteOperating(samples) {
      for (const s of samples) if (s.resetAt !== null) resets.set(s.method, s.resetAt);
    },
    async blockedMethods() {
      const t = now();
      return new Map([...blocks].filter(([, until]) => until > t));
    },
    async state() {
      const { rate } = advance();
      const t = now();
      return {
        tokens,
        rate,
        rateFactor: factor,
        inFlight,
        throttledUntil: throttledUntil > t ? throttledUntil : null,
        blockedMethods: [...blocks].filter(([, u]) => u > t).map(([method, until]) => ({ method, until })),
      };
    },
  };
}
