// Which sync_loop job runs a loop (docs/workflows.md: the sync_loop task's budget and hand-over): graphile-worker runs a new job even when
// a keyed job is already locked (#580), so the cron entry would start another loop every minute;
// instead a job that finds a loop with time left returns at once. In the last seconds of a loop's
// budget one successor starts right away, so there is no gap at the hand-over (two loops overlap
// briefly, which claims make safe), and a third job returns. tasks/sync_loop.ts keeps one of these
// per process.

/** One loop run: when its budget ends (epoch ms). */
export interface LoopRun {
  readonly endsAt: number;
}

/** The loop running in this process and, during a hand-over, its successor. */
export class LoopHandover {
  private current: LoopRun | null = null;
  private successor: LoopRun | null = null;

  /** `handoverMs`: how long before its budget ends a loop enqueues its successor. */
  constructor(readonly handoverMs: number) {}

  /** Whether a job starting at `now` runs a loop: no loop, or one in its last seconds without a successor. */
  starts(now: number): boolean {
    if (!this.current) return true;
    return !this.successor && this.current.endsAt - now <= 2 * this.handoverMs;
  }

  /** Records a loop that starts at `now` with `budgetMs`, as the current one or its successor. */
  start(now: number, budgetMs: number): LoopRun {
    const run: LoopRun = { endsAt: now + budgetMs };
    if (this.current) this.successor = run;
    else this.current = run;
    return run;
  }

  /**
   * `run` ended. True when no loop runs after it: the job that ends it enqueues the successor, or
   * the next loop would wait for the cron minute (the hand-over job may have been taken by a job
   * that returned at once because a loop still had time).
   */
  end(run: LoopRun): boolean {
    if (this.current === run) {
      this.current = this.successor;
      this.successor = null;
    } else if (this.successor === run) {
      this.successor = null;
    }
    return this.current === null;
  }
}
