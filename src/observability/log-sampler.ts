// Sampling of repetitive log lines. A scanner or a misconfigured robot can send thousands of refused
// requests a minute; one warning each drowned the log and cost more than the refusal itself. The
// first few lines of each kind per window are written as they come, the rest are counted, and one
// summary line per kind says how many were left out. Metrics still count every request.

export interface LogSamplerOptions {
  /** Lines written per key and window before the rest are only counted. */
  perWindow?: number;
  windowMs?: number;
  /** Called once per key at the end of a window in which lines were left out. */
  onSuppressed: (key: string, suppressed: number, windowMs: number) => void;
}

interface Window {
  startedAt: number;
  written: number;
  suppressed: number;
}

/** Decides per key whether a line is written now; reports what it left out once per window. */
export class LogSampler {
  readonly #perWindow: number;
  readonly #windowMs: number;
  readonly #onSuppressed: LogSamplerOptions["onSuppressed"];
  readonly #windows = new Map<string, Window>();
  #timer: NodeJS.Timeout | undefined;

  constructor(opts: LogSamplerOptions) {
    this.#perWindow = opts.perWindow ?? 10;
    this.#windowMs = opts.windowMs ?? 60_000;
    this.#onSuppressed = opts.onSuppressed;
  }

  /** True when the line for `key` is to be written; false when it is only counted. */
  admit(key: string, now = Date.now()): boolean {
    let w = this.#windows.get(key);
    if (w && now - w.startedAt >= this.#windowMs) {
      this.#close(key, w);
      w = undefined;
    }
    if (!w) {
      w = { startedAt: now, written: 0, suppressed: 0 };
      this.#windows.set(key, w);
    }
    if (w.written < this.#perWindow) {
      w.written++;
      return true;
    }
    w.suppressed++;
    this.#schedule();
    return false;
  }

  /** Reports every open window's left-out lines now (shutdown, tests). */
  flush(): void {
    for (const [key, w] of this.#windows) this.#close(key, w);
    this.#windows.clear();
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #close(key: string, w: Window): void {
    this.#windows.delete(key);
    if (w.suppressed > 0) this.#onSuppressed(key, w.suppressed, this.#windowMs);
  }

  /** Ends windows on time even when no further line of that key arrives. */
  #schedule(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(
      () => {
        const now = Date.now();
        for (const [key, w] of this.#windows) if (now - w.startedAt >= this.#windowMs) this.#close(key, w);
        if (![...this.#windows.values()].some((w) => w.suppressed > 0)) {
          clearInterval(this.#timer);
          this.#timer = undefined;
        }
      },
      Math.max(Math.floor(this.#windowMs / 4), 10),
    );
    this.#timer.unref();
  }
}
