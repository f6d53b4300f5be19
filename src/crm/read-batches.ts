// Reads for a run that must not lose its other results to one failed sub-request (reconciliation,
// §10.2, §10.3): commands go out in batches of up to 50; a sub-request that failed transiently (a
// 5xx, a timeout, a limit refusal of that entry or of the whole request) is sent again, alone with
// the others that failed, after the retry backoff (./backoff.ts), up to `attempts` sends in all.
// What still fails comes back as its failure; every other result is kept. Only reads: a write sent
// twice is never safe here (the workflows own writes, with their uncertain state).
import type { Link } from "@opentelemetry/api";
import { backoffDelayMs, type RetrySettings } from "./backoff.js";
import { type CommandOutcome, type CrmDeps, executeBatch, MAX_BATCH_SIZE } from "./batch.js";
import { type CrmCommand, isWrite } from "./catalogue.js";

/** Sends of one sub-request within a reconciliation run (Contacts or alert items), the first included. */
export const RUN_REQUEST_ATTEMPTS = 3;

export interface ReadOptions {
  /** Sends of one sub-request at most, the first included (>= 1). */
  attempts: number;
  /** The backoff between sends (retry.base_ms, retry.max_ms). */
  retry: Pick<RetrySettings, "baseMs" | "maxMs">;
  /**
   * A failure whose delay (the backoff, or what the portal asked for) is longer than this is not
   * sent again in this run: the run reports it and its own retry takes over.
   */
  maxDelayMs: number;
  /** Called before each HTTP request; may throw to stop (e.g. at shutdown). */
  beforeRequest?: () => void;
  signal?: AbortSignal | undefined;
  links?: Link[];
  /** Waits `ms` (injectable for tests); resolves early when `signal` aborts. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Outcomes in the order of `commands`; a failure is the last send's. */
export async function readBatches(
  crm: CrmDeps,
  commands: readonly CrmCommand[],
  opts: ReadOptions,
): Promise<CommandOutcome[]> {
  for (const c of commands) {
    if (isWrite(c.type)) throw new TypeError(`readBatches sends reads only, not ${c.type}`);
  }
  const out: CommandOutcome[] = new Array(commands.length);
  let todo = commands.map((_, i) => i);
  for (let attempt = 0; todo.length > 0; attempt++) {
    for (let i = 0; i < todo.length; i += MAX_BATCH_SIZE) {
      const part = todo.slice(i, i + MAX_BATCH_SIZE);
      opts.beforeRequest?.();
      const res = await executeBatch(
        crm,
        part.map((k) => commands[k] as CrmCommand),
        opts.links ? { links: opts.links } : {},
      );
      part.forEach((k, j) => {
        out[k] = res[j] as CommandOutcome;
      });
    }
    if (attempt + 1 >= opts.attempts) break;
    let wait = 0;
    const again: number[] = [];
    for (const k of todo) {
      const o = out[k] as CommandOutcome;
      if (o.ok || o.failure.kind !== "transient") continue;
      const delay = backoffDelayMs(attempt + 1, opts.retry, o.failure.retryAfterMs);
      if (delay > opts.maxDelayMs) continue;
      wait = Math.max(wait, delay);
      again.push(k);
    }
    todo = again;
    if (todo.length > 0) await (opts.sleep ?? sleep)(wait, opts.signal);
  }
  return out;
}
