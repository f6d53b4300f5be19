// The limiter across replicas (§8, §9): the portal's budget is per portal and source IP, so every
// replica draws from one token bucket kept in PostgreSQL (sql/limiter.sql: one row per portal, taken
// under a row lock by acquire_crm_request), together with a cap on HTTP requests in flight whose
// slots expire on their own when a holder dies. No replica keeps a bucket of its own. A request is
// sent only with a token and a slot; a slow request holds its slot, not the bucket, so another can
// go while a token and a slot are free. After QUERY_LIMIT_EXCEEDED the rate is cut and then climbs
// back linearly; OPERATION_TIME_LIMIT blocks only its method until the portal's reset time.
import type pg from "pg";
import { whileDatabaseAway } from "../db/while-away.js";
import { limiterWait } from "../observability/metrics.js";
import type { Settings } from "../settings-schema.js";

/** The `limiter` group of the hot settings (§12.3): limiter.refill_per_sec, burst, max_in_flight. */
export type LimiterSettings = Settings["limiter"];

/** How the rate reacts to the portal's limit: multiplicative cut, linear recovery. */
export interface AdaptiveSettings {
  /** Factor applied to the rate on QUERY_LIMIT_EXCEEDED (default 0.5). */
  decrease: number;
  /** The rate never goes below base × minFactor (default 0.1). */
  minFactor: number;
  /**
   * The factor climbs back by this much per second (default 0.05: from 0.5 to 1 in 10 s; the spare
   * limiter's SQL, sql/limiter/spare.sql, uses the same number).
   */
  recoveryPerSec: number;
  /** No request for this long after a refusal; further refusals inside it do not cut again (default 1000). */
  cooldownMs: number;
  /** A reply to a request sent under a cut rate multiplies the factor by this (default 4). */
  increase: number;
}

export const DEFAULT_ADAPTIVE: AdaptiveSettings = {
  decrease: 0.5,
  minFactor: 0.1,
  recoveryPerSec: 0.05,
  cooldownMs: 1000,
  increase: 4,
};

/** Permission to send one HTTP request. Release it when the reply (or the failure) is in. */
export interface LimiterPermit {
  /** When the token was granted, by the limiter's clock (epoch ms). */
  readonly grantedAt: number;
  /** The rate was cut (after a limit refusal) when the token was granted. */
  readonly reduced?: boolean;
  /**
   * Gives the slot back. `answered`: the portal answered the request with HTTP 2xx; the shared
   * limiter then records the time for every replica's readiness (sql/limiter/health.sql), in the same
   * call. Never rejects: a release the limiter's database does not take (it is away) is tried again
   * for a while, and the slot frees itself after its TTL anyway.
   */
  release(answered?: boolean): Promise<void>;
}

/** One method's operating time as a reply reported it. */
export interface OperatingSample {
  method: string;
  /** `time.operating`, seconds. */
  operating: number;
  /** `time.operating_reset_at` as epoch ms, when present. */
  resetAt: number | null;
}

/** What /internal/sync/v1/status may show about the limiter (§14). */
export interface LimiterState {
  tokens: number;
  /** Current requests per second after any cut. */
  rate: number;
  rateFactor: number;
  inFlight: number;
  throttledUntil: number | null;
  blockedMethods: Array<{ method: string; until: number }>;
}

/** The limiter every CRM request goes through. */
export interface CrmLimiter {
  /** The shared bucket's name when the state lives in PostgreSQL (/metrics reads it there). */
  readonly bucket?: string;
  /** Waits for a token and an in-flight slot. Rejects only if `signal` aborts. */
  acquire(opts?: { signal?: AbortSignal }): Promise<LimiterPermit>;
  /** The portal answered QUERY_LIMIT_EXCEEDED (or another limit refusal): cut the rate. */
  noteRateLimited(): Promise<void>;
  /**
   * The portal answered a request sent under `permit` (no limit refusal). When the rate was cut, the
   * limit has passed: the rate climbs back faster than its linear recovery.
   */
  noteAnswered?(permit: LimiterPermit): Promise<void>;
  /** OPERATION_TIME_LIMIT for `method`: block it until `until` (epoch ms). Returns the effective end. */
  noteMethodBlocked(method: string, until: number): Promise<number>;
  /** Records operating times from replies (the next block uses the latest reset time). */
  noteOperating(samples: readonly OperatingSample[]): Promise<void>;
  /** Methods blocked right now, with the end of each block (epoch ms). */
  blockedMethods(): Promise<Map<string, number>>;
  state(): Promise<LimiterState>;
  /**
   * When the portal last answered any replica (HTTP 2xx), by the shared state; null when unknown or
   * when the limiter is this process's alone.
   */
  lastAnswered?(): Promise<number | null>;
}

/** Fixed settings, or a function read on every call (a new settings version applies at once). */
export type SettingsSource = LimiterSettings | (() => LimiterSettings);

function read(s: SettingsSource): LimiterSettings {
  return typeof s === "function" ? s() : s;
}

function aborted(): Error {
  return Object.assign(new Error("waiting for the CRM limiter was aborted"), { name: "AbortError" });
}

function checkAbort(signal?: AbortSignal): void {
  if (signal?.aborted) throw aborted();
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

/** What the bucket answers a request for a slot (acquire_crm_request, acquire_spare_crm_request). */
interface SlotGrant {
  granted: boolean;
  slot_id: string | null;
  /** How long to wait before asking again, when not granted. */
  wait_ms: number;
}

/**
 * The poll loop of both limiters: asks the bucket (`ask`) until it grants a slot, waiting between
 * asks what the bucket says, between `minWaitMs` and `maxPollMs`, plus a jitter of up to `minWaitMs`
 * so replicas polling the same bucket do not stay in lockstep. Rejects only if `signal` aborts.
 */
async function pollForSlot<G extends SlotGrant>(
  ask: () => Promise<G | undefined>,
  o: { maxPollMs: number; minWaitMs: number; signal?: AbortSignal | undefined },
): Promise<G & { slot_id: string }> {
  for (;;) {
    checkAbort(o.signal);
    const r = await ask();
    if (r?.granted && r.slot_id) return r as G & { slot_id: string };
    const wait =
      Math.min(Math.max(r?.wait_ms ?? o.maxPollMs, o.minWaitMs), o.maxPollMs) +
      Math.floor(Math.random() * o.minWaitMs);
    await sleep(wait, o.signal);
  }
}

/**
 * The permit for a granted slot. Its release is given once: while the database is away it is tried
 * again until `releaseWithinMs` after the grant, and it never throws, so a reply already in hand is
 * never lost to it (issue 36).
 */
function slotPermit(p: {
  grantedAt: number;
  reduced?: boolean;
  releaseWithinMs: number;
  release: (answered: boolean) => Promise<unknown>;
}): LimiterPermit {
  const expires = Date.now() + p.releaseWithinMs;
  let released = false;
  return {
    grantedAt: p.grantedAt,
    ...(p.reduced === undefined ? {} : { reduced: p.reduced }),
    async release(answered) {
      if (released) return;
      released = true;
      await whileDatabaseAway(() => p.release(answered === true), { until: expires }).catch(() => undefined);
    },
  };
}

export interface PgLimiterOptions {
  pool: pg.Pool;
  /** Bucket name: one per portal and credential, e.g. the portal host. */
  bucket: string;
  /** Who holds slots (host:pid); shown in crm_inflight_slots for diagnosis. */
  holder: string;
  settings: SettingsSource;
  /** A slot frees itself this long after it was taken; must exceed the HTTP timeout. */
  slotTtlMs: number;
  adaptive?: Partial<AdaptiveSettings>;
  /** Upper bound of one wait between polls, ms (default 1000); the bucket says how long to wait. */
  maxPollMs?: number;
}

/** The PostgreSQL limiter shared by every replica (sql/limiter.sql). */
export function createPgLimiter(opts: PgLimiterOptions): CrmLimiter {
  const adaptive = { ...DEFAULT_ADAPTIVE, ...opts.adaptive };
  const maxPoll = opts.maxPollMs ?? 1000;
  const { pool, bucket } = opts;

  /** Polls the bucket until a token and a slot are granted; rejects only if `signal` aborts. */
  async function acquireOnce(signal?: AbortSignal): Promise<LimiterPermit> {
    let s = read(opts.settings);
    const r = await pollForSlot(
      async () => {
        s = read(opts.settings);
        const { rows } = await pool.query<SlotGrant & { decided_at: Date; rate: number }>(
          `select granted, slot_id, wait_ms, decided_at, rate
             from bitrix_sync.acquire_crm_request($1, $2, $3, $4, $5, $6, $7)`,
          [
            bucket,
            opts.holder,
            s.refillPerSec,
            s.burst,
            s.maxInFlight,
            opts.slotTtlMs,
            adaptive.recoveryPerSec,
          ],
        );
        return rows[0];
      },
      { maxPollMs: maxPoll, minWaitMs: 5, signal },
    );
    const slot = r.slot_id;
    return slotPermit({
      grantedAt: r.decided_at.getTime(),
      reduced: r.rate < s.refillPerSec * 0.999,
      // The slot frees itself slotTtlMs after it was taken; the release is tried for as long as a
      // spare slot lives (SPARE_SLOT_TTL_MS), which is longer: one that never lands costs only that.
      releaseWithinMs: SPARE_SLOT_TTL_MS,
      release: (answered) =>
        answered
          ? pool.query("select bitrix_sync.release_crm_request($1, $2, true)", [slot, bucket])
          : pool.query("select bitrix_sync.release_crm_request($1)", [slot]),
    });
  }

  return {
    bucket,
    async acquire(a = {}) {
      const waited = limiterWait.startTimer();
      try {
        const permit = await acquireOnce(a.signal);
        waited({ outcome: "granted" });
        return permit;
      } catch (e) {
        waited({ outcome: a.signal?.aborted ? "aborted" : "failed" });
        throw e;
      }
    },
    ...bucketFeedback(pool, bucket, adaptive),
    blockedMethods: () => blockedMethods(pool, bucket),
    async lastAnswered() {
      const { rows } = await pool.query<{ at: Date | null }>(
        "select bitrix_sync.crm_last_answered_at($1) as at",
        [bucket],
      );
      return rows[0]?.at?.getTime() ?? null;
    },
    state: () => bucketState(pool, bucket, read(opts.settings)),
  };
}

/** What the portal's replies teach the shared bucket: a cut rate, its recovery, blocked methods. */
function bucketFeedback(
  pool: pg.Pool,
  bucket: string,
  adaptive: AdaptiveSettings,
): Pick<CrmLimiter, "noteRateLimited" | "noteAnswered" | "noteMethodBlocked" | "noteOperating"> {
  return {
    async noteRateLimited() {
      await pool.query("select bitrix_sync.note_rate_limited($1, $2, $3, $4, $5)", [
        bucket,
        adaptive.decrease,
        adaptive.minFactor,
        adaptive.cooldownMs,
        adaptive.recoveryPerSec,
      ]);
    },
    async noteAnswered(permit) {
      if (!permit.reduced) return;
      await pool.query("select bitrix_sync.note_crm_answered($1, $2, $3)", [
        bucket,
        adaptive.increase,
        adaptive.recoveryPerSec,
      ]);
    },
    async noteMethodBlocked(method, until) {
      const { rows } = await pool.query<{ until: Date }>(
        "select bitrix_sync.note_method_blocked($1, $2, $3) as until",
        [bucket, method, new Date(until)],
      );
      return rows[0]?.until.getTime() ?? until;
    },
    async noteOperating(samples) {
      if (samples.length === 0) return;
      await pool.query("select bitrix_sync.note_crm_operating($1, $2, $3, $4)", [
        bucket,
        samples.map((s) => s.method),
        samples.map((s) => s.operating),
        samples.map((s) => (s.resetAt === null ? null : new Date(s.resetAt))),
      ]);
    },
  };
}

/** Methods of the bucket blocked right now (OPERATION_TIME_LIMIT), with the end of each block. */
async function blockedMethods(pool: pg.Pool, bucket: string): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ method: string; blocked_until: Date }>(
    "select method, blocked_until from bitrix_sync.blocked_crm_methods($1)",
    [bucket],
  );
  return new Map(rows.map((r) => [r.method, r.blocked_until.getTime()]));
}

/** The shared bucket as /internal/sync/v1/status shows it. */
async function bucketState(pool: pg.Pool, bucket: string, s: LimiterSettings): Promise<LimiterState> {
  const { rows } = await pool.query<{
    tokens: number;
    rate_factor: number;
    in_flight: number;
    throttled_until: Date | null;
  }>("select tokens, rate_factor, in_flight, throttled_until from bitrix_sync.crm_limiter_state($1)", [
    bucket,
  ]);
  const r = rows[0];
  const blocked = await blockedMethods(pool, bucket);
  const factor = r?.rate_factor ?? 1;
  return {
    tokens: r?.tokens ?? s.burst,
    rate: s.refillPerSec * factor,
    rateFactor: factor,
    inFlight: r?.in_flight ?? 0,
    throttledUntil: r?.throttled_until?.getTime() ?? null,
    blockedMethods: [...blocked].map(([method, until]) => ({ method, until })),
  };
}

/** How long the database keeps a spare slot (SPARE_SLOT_TTL in sql/limiter/spare.sql). */
const SPARE_SLOT_TTL_MS = 120_000;

export interface SpareLimiterOptions {
  pool: pg.Pool;
  /** The sync path's limiter: its bucket is shared, and limit signals are reported to it. */
  main: CrmLimiter & { bucket: string };
  holder: string;
  maxPollMs?: number;
}

/**
 * A limiter that gives only spare budget (sql/limiter/spare.sql, acquire_spare_crm_request): a
 * request goes when the shared bucket is full (its refill unused), the rate is not cut and the sync
 * path has a free in-flight slot, and no faster than audit.budget_share of the rate. The convergence
 * audit and `npm run diagnose` read through it, so they never take a token sync traffic is waiting
 * for. The database takes the rate, burst, cap and share from the active settings and decides the
 * slot's lifetime and the rate's recovery itself (its admin callers are not trusted with them), and
 * counts every grant per login (spare_budget_use). Limit refusals and operating times go to the
 * shared bucket, as the sync path's do.
 */
export function createSpareLimiter(opts: SpareLimiterOptions): CrmLimiter {
  const maxPoll = opts.maxPollMs ?? 5000;
  const { pool, main } = opts;
  async function acquireOnce(signal?: AbortSignal): Promise<LimiterPermit> {
    const r = await pollForSlot(
      async () => {
        const { rows } = await pool.query<SlotGrant>(
          "select granted, slot_id, wait_ms from bitrix_sync.acquire_spare_crm_request($1, $2)",
          [main.bucket, opts.holder],
        );
        return rows[0];
      },
      { maxPollMs: maxPoll, minWaitMs: 10, signal },
    );
    const slot = r.slot_id;
    return slotPermit({
      grantedAt: Date.now(),
      // The database gives a spare slot SPARE_SLOT_TTL: past that it is gone anyway.
      releaseWithinMs: SPARE_SLOT_TTL_MS,
      release: () => pool.query("select bitrix_sync.release_spare_crm_request($1)", [slot]),
    });
  }
  return {
    bucket: main.bucket,
    acquire: (a = {}) => acquireOnce(a.signal),
    noteRateLimited: () => main.noteRateLimited(),
    noteMethodBlocked: (method, until) => main.noteMethodBlocked(method, until),
    noteOperating: (samples) => main.noteOperating(samples),
    blockedMethods: () => main.blockedMethods(),
    state: () => main.state(),
  };
}
