// The portal's two limits (reference §2): a leaky bucket per portal that refuses whole HTTP requests
// with 503 QUERY_LIMIT_EXCEEDED, and per-method operating time summed over one-minute buckets of a
// ten-minute window that refuses the next call of that method with 429 OPERATION_TIME_LIMIT.

/** Each accepted HTTP request adds 1; the level drains at `drainPerSec`; above `threshold`: refused. */
export class LeakyBucket {
  private level = 0;
  private last: number;

  constructor(
    readonly drainPerSec: number,
    readonly threshold: number,
    private readonly now: () => number = Date.now,
  ) {
    this.last = now();
  }

  private drain(): void {
    const t = this.now();
    this.level = Math.max(0, this.level - ((t - this.last) / 1000) * this.drainPerSec);
    this.last = t;
  }

  /** Counts one request; false (and nothing counted) when it would exceed the threshold. */
  tryAdd(): boolean {
    this.drain();
    if (this.level + 1 > this.threshold) return false;
    this.level += 1;
    return true;
  }

  /** Current level, for tests. */
  current(): number {
    this.drain();
    return this.level;
  }

  /** Fills the bucket as if `n` requests had just arrived (another app on the same portal/IP). */
  add(n: number): void {
    this.drain();
    this.level += n;
  }
}

export interface OperatingOptions {
  /** Seconds of execution a method may accumulate in the window (cloud example: 480). */
  limitSec: number;
  /** Window length, ms (portal: 600 000). */
  windowMs: number;
  /** Bucket length, ms (portal: 60 000). */
  bucketMs: number;
}

interface Bucket {
  start: number;
  sum: number;
}

/** Operating time per REST method, as reported in `time.operating` / `time.operating_reset_at`. */
export class OperatingMeter {
  private readonly buckets = new Map<string, Bucket[]>();

  constructor(
    readonly opts: OperatingOptions,
    private readonly now: () => number = Date.now,
  ) {}

  private live(method: string): Bucket[] {
    const t = this.now();
    const list = (this.buckets.get(method) ?? []).filter((b) => b.start + this.opts.windowMs > t);
    this.buckets.set(method, list);
    return list;
  }

  /** Summed seconds and when the oldest bucket drops out (epoch seconds, as the portal reports). */
  state(method: string): { operating: number; operatingResetAt: number } {
    const list = this.live(method);
    const operating = list.reduce((s, b) => s + b.sum, 0);
    const oldest = list[0]?.start ?? this.now();
    return {
      operating: Math.round(operating * 1e6) / 1e6,
      operatingResetAt: Math.ceil((oldest + this.opts.windowMs) / 1000),
    };
  }

  /** True when the method is over its limit: its next call is refused. */
  blocked(method: string): boolean {
    return this.state(method).operating > this.opts.limitSec;
  }

  /** Adds `sec` seconds of execution to the method's current bucket. */
  charge(method: string, sec: number): { operating: number; operatingResetAt: number } {
    const list = this.live(method);
    const t = this.now();
    let b = list.at(-1);
    if (!b || t - b.start >= this.opts.bucketMs) {
      b = { start: t, sum: 0 };
      list.push(b);
    }
    b.sum += sec;
    return this.state(method);
  }
}
