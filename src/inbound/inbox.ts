// Durable inbox writes for the receivers, grouped: the events of requests that arrive together go
// to PostgreSQL as one accept_webhooks() call, so they share one round trip and one commit, and
// each request is answered only after that commit. On loopback with 2 cores this is the difference
// between ~1 300 and several thousand accepted requests per second (docs/receivers.md, benchmark):
// the per-request cost was the database socket write and the commit, not the HTTP work.
//
// Every wait is bounded (docs/receivers.md, "Bounded waits"): the queue holds at most `maxPending`
// events (beyond that a write fails at once), an event not sent within `maxQueueWaitMs` fails
// without being sent, and the call itself runs on the receiver pool, whose statement and lock
// timeouts end it within seconds (src/db/pools.ts). A failed or timed-out call rolls back as a
// whole: every event of the group is answered 503 and none has a row.
import type pg from "pg";
import type { ReceiverName } from "../config/receivers.js";

export interface InboxEvent {
  receiver: ReceiverName;
  entityTypeId: number;
  entityId: string;
  sourceIp: string | null;
  /** W3C traceparent of the request's inbox write span, stored with the row; absent when tracing is off. */
  traceContext?: string | null;
}

/** Why accept_webhooks() refused an event (sql/receiver.sql); nothing was written for it. */
const INBOX_REFUSALS = [
  "alert_config_invalid",
  "alert_entity_type_unset",
  "entity_id",
  "entity_type",
  "unknown_receiver",
] as const;
export type InboxRefusal = (typeof INBOX_REFUSALS)[number];

const isRefusal = (r: string | null | undefined): r is InboxRefusal =>
  (INBOX_REFUSALS as readonly (string | null | undefined)[]).includes(r);

/**
 * A failed call whose cause may be one event's data (a data or constraint error, or an error the
 * function raised) rather than the database: worth retrying the events one by one. A connection,
 * timeout or lock failure would only fail again, once per event.
 */
function mayBeOneEvent(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && /^(22|23|BS|P0)/.test(code);
}

/** `group`: how many events shared the call (one round trip and one commit). */
export type InboxOutcome =
  | { accepted: true; inboxId: string; group: number }
  | { accepted: false; refusal: InboxRefusal; group: number };

export interface InboxWriterOptions {
  /** Events per call (accept_webhooks takes at most 1000). */
  maxBatch?: number;
  /** Calls in flight at once; each holds a pool connection while it runs. */
  maxInFlight?: number;
  /** Events waiting to be sent; a write beyond this fails at once with InboxBusyError. */
  maxPending?: number;
  /** How long an event may wait to be sent; after that it fails with InboxBusyError, unsent. */
  maxQueueWaitMs?: number;
}

/** Why the writer refused an event before sending it; the event has no row. */
export type InboxBusyReason = "queue_full" | "queue_wait";

/** An event the writer did not send: the queue was full, or the database too slow to take it in time. */
export class InboxBusyError extends Error {
  override name = "InboxBusyError";
  readonly reason: InboxBusyReason;
  constructor(reason: InboxBusyReason) {
    super(reason === "queue_full" ? "the inbox queue is full" : "the event waited too long to be sent");
    this.reason = reason;
  }
}

/** The probe's event was refused by accept_webhooks (the database answered, but would not write). */
export class InboxProbeRefused extends Error {
  override name = "InboxProbeRefused";
}

/** Defaults: a robot burst of a few hundred is normal; thousands waiting means the database is stuck. */
const DEFAULT_MAX_PENDING = 1_000;
const DEFAULT_MAX_QUEUE_WAIT_MS = 1_500;
/** The readiness probe's own lock and statement limits: it must answer well inside readiness's deadline. */
const PROBE_LOCK_TIMEOUT = "500ms";
const PROBE_STATEMENT_TIMEOUT = "1000ms";

interface Pending {
  event: InboxEvent;
  /** When the event may no longer be sent (ms since the epoch). */
  sendBy: number;
  resolve: (o: InboxOutcome) => void;
  reject: (e: unknown) => void;
}

const SQL = "select ord, inbox_id, refusal from bitrix_sync.accept_webhooks($1, $2, $3, $4, $5)";

function params(events: readonly InboxEvent[]): unknown[] {
  return [
    events.map((e) => e.receiver),
    events.map((e) => e.entityTypeId),
    events.map((e) => e.entityId),
    events.map((e) => e.sourceIp),
    events.map((e) => e.traceContext ?? null),
  ];
}

/** Writes inbox events in groups; `write` resolves after the event's row is committed. */
export class InboxWriter {
  readonly #pool: pg.Pool;
  readonly #maxBatch: number;
  readonly #maxInFlight: number;
  readonly #maxPending: number;
  readonly #maxQueueWaitMs: number;
  #queue: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;
  #sweeper: NodeJS.Timeout | undefined;

  constructor(pool: pg.Pool, opts: InboxWriterOptions = {}) {
    this.#pool = pool;
    this.#maxBatch = Math.min(Math.max(opts.maxBatch ?? 200, 1), 1000);
    this.#maxInFlight = Math.max(opts.maxInFlight ?? 2, 1);
    this.#maxPending = Math.max(opts.maxPending ?? DEFAULT_MAX_PENDING, 1);
    this.#maxQueueWaitMs = Math.max(opts.maxQueueWaitMs ?? DEFAULT_MAX_QUEUE_WAIT_MS, 1);
  }

  /** Events waiting to be sent now. */
  get pending(): number {
    return this.#queue.length;
  }

  /**
   * Records one event; rejects with InboxBusyError when it was not sent (queue full or waited too
   * long), or with the database error if its call failed. Either way it has no row. A call that
   * failed on what may be one event's data is retried event by event, so only that event's request
   * fails.
   */
  write(event: InboxEvent): Promise<InboxOutcome> {
    if (this.#queue.length >= this.#maxPending) return Promise.reject(new InboxBusyError("queue_full"));
    return new Promise((resolve, reject) => {
      this.#queue.push({ event, sendBy: Date.now() + this.#maxQueueWaitMs, resolve, reject });
      this.#watchQueue();
      // Wait for the rest of this event-loop turn: requests parsed together are written together.
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => {
          this.#scheduled = false;
          this.#pump();
        });
      }
    });
  }

  /**
   * The write path end to end without keeping anything: one Contact event through the same
   * statement, in a transaction that is rolled back, with a short lock and statement timeout. It
   * takes the locks a real write takes, so a locked inbox, a missing privilege or a full receiver
   * pool fail it. Resolves when the write would have worked.
   */
  async probe(): Promise<void> {
    const c = await this.#pool.connect();
    try {
      await c.query("begin");
      await c.query(`set local lock_timeout = '${PROBE_LOCK_TIMEOUT}'`);
      await c.query(`set local statement_timeout = '${PROBE_STATEMENT_TIMEOUT}'`);
      const { rows } = await c.query<{ inbox_id: string | null }>(
        SQL,
        params([{ receiver: "contact", entityTypeId: 3, entityId: "1", sourceIp: null }]),
      );
      if (rows[0]?.inbox_id == null) throw new InboxProbeRefused("accept_webhooks refused the probe event");
    } finally {
      // A connection that cannot even roll back is closed, not handed to the next request.
      const clean = await c.query("rollback").then(
        () => true,
        () => false,
      );
      c.release(clean ? undefined : new Error("rollback failed"));
    }
  }

  /** While events wait, fail those past their send-by time, so their requests end on time. */
  #watchQueue(): void {
    if (this.#sweeper !== undefined) return;
    this.#sweeper = setInterval(
      () => {
        this.#expire();
        if (this.#queue.length === 0) {
          clearInterval(this.#sweeper);
          this.#sweeper = undefined;
        }
      },
      Math.min(100, this.#maxQueueWaitMs),
    );
    this.#sweeper.unref();
  }

  #expire(): void {
    const now = Date.now();
    if (this.#queue.every((p) => p.sendBy > now)) return;
    const keep: Pending[] = [];
    for (const p of this.#queue) {
      if (p.sendBy > now) keep.push(p);
      else p.reject(new InboxBusyError("queue_wait"));
    }
    this.#queue = keep;
  }

  #pump(): void {
    this.#expire();
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch);
      this.#inFlight++;
      void this.#flush(batch).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #flush(batch: Pending[]): Promise<void> {
    try {
      await this.#call(batch);
    } catch (e) {
      if (batch.length > 1 && mayBeOneEvent(e)) {
        // Requests grouped by chance must not share one request's fate: each on its own.
        for (const p of batch) await this.#flush([p]);
        return;
      }
      for (const p of batch) p.reject(e);
    }
  }

  /** One accept_webhooks() call for `batch`; settles every event, or throws for the call. */
  async #call(batch: Pending[]): Promise<void> {
    const { rows } = await this.#pool.query<{
      ord: number;
      inbox_id: string | null;
      refusal: string | null;
    }>({
      name: "bitrix_sync.accept_webhooks",
      text: SQL,
      values: params(batch.map((p) => p.event)),
    });
    const byOrd = new Map(rows.map((r) => [r.ord, r]));
    const group = batch.length;
    batch.forEach((p, i) => {
      const r = byOrd.get(i + 1);
      if (r?.inbox_id != null) p.resolve({ accepted: true, inboxId: r.inbox_id, group });
      else if (isRefusal(r?.refusal)) p.resolve({ accepted: false, refusal: r.refusal, group });
      else p.reject(new Error("accept_webhooks returned no outcome for an event"));
    });
  }
}
