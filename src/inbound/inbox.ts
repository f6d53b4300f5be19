// Durable inbox writes for the receivers, grouped: the events of requests that arrive together go
// to PostgreSQL as one accept_webhooks() call, so they share one round trip and one commit, and
// each request is answered only after that commit. On loopback with 2 cores this is the difference
// between ~1 300 and several thousand accepted requests per second (docs/receivers.md, benchmark):
// the per-request cost was the database socket write and the commit, not the HTTP work.
import type pg from "pg";
import type { ReceiverName } from "./config.js";

export interface InboxEvent {
  receiver: ReceiverName;
  entityTypeId: number;
  entityId: string;
  sourceIp: string | null;
  /** W3C traceparent of the request's inbox write span, stored with the row; null when tracing is off. */
  traceContext: string | null;
}

/** Why accept_webhooks() refused an event; nothing was written for it. */
export type InboxRefusal = "entity_type" | "alert_entity_type_unset";

/** `group`: how many events shared the call (one round trip and one commit). */
export type InboxOutcome =
  | { accepted: true; inboxId: string; group: number }
  | { accepted: false; refusal: InboxRefusal; group: number };

export interface InboxWriterOptions {
  /** Events per call (accept_webhooks takes at most 1000). */
  maxBatch?: number;
  /** Calls in flight at once; each holds a pool connection while it runs. */
  maxInFlight?: number;
}

interface Pending {
  event: InboxEvent;
  resolve: (o: InboxOutcome) => void;
  reject: (e: unknown) => void;
}

const SQL = "select ord, inbox_id, refusal from bitrix_sync.accept_webhooks($1, $2, $3, $4, $5)";

/** Writes inbox events in groups; `write` resolves after the event's row is committed. */
export class InboxWriter {
  readonly #pool: pg.Pool;
  readonly #maxBatch: number;
  readonly #maxInFlight: number;
  #queue: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;

  constructor(pool: pg.Pool, opts: InboxWriterOptions = {}) {
    this.#pool = pool;
    this.#maxBatch = Math.min(Math.max(opts.maxBatch ?? 200, 1), 1000);
    this.#maxInFlight = Math.max(opts.maxInFlight ?? 2, 1);
  }

  /** Records one event; rejects with the database error if its group's call fails. */
  write(event: InboxEvent): Promise<InboxOutcome> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ event, resolve, reject });
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

  #pump(): void {
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
      const { rows } = await this.#pool.query<{
        ord: number;
        inbox_id: string | null;
        refusal: string | null;
      }>({
        name: "bitrix_sync.accept_webhooks",
        text: SQL,
        values: [
          batch.map((p) => p.event.receiver),
          batch.map((p) => p.event.entityTypeId),
          batch.map((p) => p.event.entityId),
          batch.map((p) => p.event.sourceIp),
          batch.map((p) => p.event.traceContext),
        ],
      });
      const byOrd = new Map(rows.map((r) => [r.ord, r]));
      batch.forEach((p, i) => {
        const r = byOrd.get(i + 1);
        const group = batch.length;
        if (r?.inbox_id != null) p.resolve({ accepted: true, inboxId: r.inbox_id, group });
        else if (r?.refusal === "entity_type" || r?.refusal === "alert_entity_type_unset") {
          p.resolve({ accepted: false, refusal: r.refusal, group });
        } else p.reject(new Error("accept_webhooks returned no outcome for an event"));
      });
    } catch (e) {
      for (const p of batch) p.reject(e);
    }
  }
}
