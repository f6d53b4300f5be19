// Recording an outcome across a database restart (issue 36). A lane that already knows what happened
// (the portal's answer to a command, a step that failed, an intent to hand back) and cannot write it
// because the database is away would otherwise leave its row leased until the lease expires: a
// minute by default, and for a write in flight the start of a late-write wait of its own. Instead it
// tries again, with a short growing pause, until the write lands, the database refuses it for good
// (any other error: a stale lease token, BS001, ends it at once), or the holder's bound passes.
import { setTimeout as delay } from "node:timers/promises";
import { isConnectionLost, isWriteRefused } from "./errors.js";

/** The first pause between tries; it doubles up to RETRY_MAX_MS. */
export const RETRY_FIRST_MS = 200;
/** The longest pause between tries: a database back is noticed within this long. */
export const RETRY_MAX_MS = 1_000;

/**
 * True when a statement failed because the database is away (a refused or lost connection, a server
 * starting or stopping) or takes no writes for now (a primary fenced read-only during a failover):
 * the same statement may succeed in a moment.
 */
export function isDatabaseAway(e: unknown): boolean {
  return isConnectionLost(e) || isWriteRefused(e);
}

export interface WhileAwayOptions {
  /** Epoch ms: no try starts after this (the holder's lease end, or a bound of its own). */
  until: number;
  /** Ends the waiting early (a shutdown); the last error is thrown. */
  signal?: AbortSignal | undefined;
}

/**
 * Runs `fn`, and again while it fails because the database is away, until it succeeds or `until`
 * passes; then throws the last error. Every write it repeats must be fenced (a lease token) or
 * idempotent: a try whose commit was lost with the connection may have landed.
 */
export async function whileDatabaseAway<T>(fn: () => Promise<T>, opts: WhileAwayOptions): Promise<T> {
  for (let pause = RETRY_FIRST_MS; ; pause = Math.min(RETRY_MAX_MS, pause * 2)) {
    try {
      return await fn();
    } catch (e) {
      if (!isDatabaseAway(e) || Date.now() + pause > opts.until || opts.signal?.aborted) throw e;
      await delay(pause, undefined, opts.signal ? { signal: opts.signal } : {}).catch(() => undefined);
      if (opts.signal?.aborted) throw e;
    }
  }
}
