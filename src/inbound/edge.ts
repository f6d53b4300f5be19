// The public nginx's own refusals, counted by the service (§10.1, §15; docs/deployment.md, "The
// proxy's refusals"). A request nginx refuses (a source outside the allow-list, a method, a body too
// large, the rate limit, an unknown path) never reaches the receivers, so nginx hands the refusal to
// this route instead: a POST with no body, no query and none of the client's headers, carrying only
// the reason, the receiver route and the address nginx saw (src/config/nginx.ts renders it). The
// client's answer stays nginx's own, whatever this route does.
//
// The route believes its headers only from a trusted proxy (BITRIX_SYNC_TRUSTED_PROXY_CIDRS) or
// loopback; to anyone else it does not exist (404, like any unknown path, counted nowhere). It counts
// bitrix_sync_webhook_rejected_total{receiver,reason} and, for reason source_ip, notes the address
// in the journal of refused sources (RefusedSourceJournal: gathered in memory for a few seconds,
// then one call of bitrix_sync.record_refused_sources, sql/webhooks/edge_refusals.sql).
import type { HttpBindings } from "@hono/node-server";
import { Hono } from "hono";
import type pg from "pg";
import type { Cidr } from "../config/cidr.js";
import { cidrMatcher } from "../config/cidr.js";
import {
  EDGE_REASON_HEADER,
  EDGE_RECEIVER_HEADER,
  EDGE_RECEIVERS,
  EDGE_REFUSAL_PATH,
  EDGE_REFUSALS,
  type EdgeReason,
  type EdgeReceiver,
} from "../config/edge-contract.js";
import { sqlstate } from "../db/errors.js";
import type { Logger } from "../observability/logger.js";
import { webhookRejected } from "../observability/metrics.js";
import { clientAddress, FORWARDED_ADDRESS_HEADER } from "./client-address.js";
import { peerAddress } from "./routes.js";

const isReason = (v: string | undefined): v is EdgeReason =>
  v !== undefined && Object.hasOwn(EDGE_REFUSALS, v);
const isReceiver = (v: string | undefined): v is EdgeReceiver =>
  v !== undefined && (EDGE_RECEIVERS as readonly string[]).includes(v);

/** The one address a header holds (IPv4-mapped IPv6 unwrapped), or null. */
function forwardedAddress(header: string | undefined): string | null {
  if (header === undefined) return null;
  // clientAddress with the peer trusted: it answers the peer itself when the header is not one address.
  const address = clientAddress("", header, () => true);
  return address === "" ? null : address;
}

/** Loopback peers are always trusted: a proxy on the same host. */
const LOOPBACK = /^(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1)$/;

interface Entry {
  address: string;
  receiver: EdgeReceiver;
  count: number;
  first: Date;
  last: Date;
}

export interface RefusedSourceJournalOptions {
  /** How long addresses are gathered before one database call (default 5 s). */
  flushMs?: number;
  /** Distinct address and receiver pairs held between two calls; more are counted, not journaled (default 1 000). */
  maxEntries?: number;
}

/**
 * The journal of refused source addresses, gathered in memory and written in one call per window:
 * a flood of refusals costs the database one short statement every few seconds. Bounded: past
 * `maxEntries` distinct addresses in a window the rest are dropped from the journal (the metric
 * still counts them) and a line says how many.
 */
export class RefusedSourceJournal {
  private entries = new Map<string, Entry>();
  private dropped = 0;
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> = Promise.resolve();
  private readonly flushMs: number;
  private readonly maxEntries: number;

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    opts: RefusedSourceJournalOptions = {},
  ) {
    this.flushMs = opts.flushMs ?? 5_000;
    this.maxEntries = opts.maxEntries ?? 1_000;
  }

  /** Notes one refusal of `address` on `receiver`. */
  note(address: string, receiver: EdgeReceiver, at = new Date()): void {
    const key = `${receiver}|${address}`;
    const e = this.entries.get(key);
    if (e) {
      e.count++;
      e.last = at;
    } else if (this.entries.size >= this.maxEntries) {
      this.dropped++;
    } else {
      this.entries.set(key, { address, receiver, count: 1, first: at, last: at });
    }
    this.timer ??= setTimeout(() => void this.flush(), this.flushMs).unref();
  }

  /** Writes what was gathered now; resolves when it is written (or given up, and logged). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = [...this.entries.values()];
    const dropped = this.dropped;
    this.entries = new Map();
    this.dropped = 0;
    this.writing = this.writing.then(() => this.write(batch, dropped));
    return this.writing;
  }

  /** Stops the timer and writes what is left (on shutdown). */
  close(): Promise<void> {
    return this.flush();
  }

  private async write(batch: Entry[], dropped: number): Promise<void> {
    if (dropped > 0) {
      this.log.warn(
        { event: "edge.refused_sources_dropped", dropped, windowSec: this.flushMs / 1000 },
        "too many distinct refused addresses in one window; counted, not journaled",
      );
    }
    if (batch.length === 0) return;
    try {
      await this.pool.query(
        "select bitrix_sync.record_refused_sources($1::inet[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[])",
        [
          batch.map((e) => e.address),
          batch.map((e) => e.receiver),
          batch.map((e) => e.count),
          batch.map((e) => e.first),
          batch.map((e) => e.last),
        ],
      );
    } catch (e) {
      // The journal is a diagnostic aid; the metric has counted every refusal already.
      this.log.warn(
        { event: "edge.refused_sources_failed", sqlstate: sqlstate(e), addresses: batch.length },
        "could not journal the refused source addresses; they stay counted in the metric",
      );
    }
  }
}

export interface EdgeRouteDeps {
  /** Proxies allowed to report refusals (BITRIX_SYNC_TRUSTED_PROXY_CIDRS); loopback always is. */
  trustedProxies?: readonly Cidr[];
  journal?: RefusedSourceJournal;
}

type Env = { Bindings: Partial<HttpBindings> | undefined };

/** The internal refusal route, to be mounted at the app's root. */
export function edgeRoutes(deps: EdgeRouteDeps): Hono<Env> {
  const app = new Hono<Env>();
  const trustedProxy = cidrMatcher(deps.trustedProxies ?? []);
  const trusted = (peer: string) => LOOPBACK.test(peer) || trustedProxy(peer);
  app.post(EDGE_REFUSAL_PATH, (c) => {
    const peer = peerAddress(c.env);
    // To anyone but the proxy this path does not exist, and nothing is counted.
    if (peer === null || !trusted(peer)) return c.json({ error: "not_found" }, 404);
    const reason = c.req.header(EDGE_REASON_HEADER);
    const receiver = c.req.header(EDGE_RECEIVER_HEADER);
    if (!isReason(reason) || !isReceiver(receiver)) return c.json({ error: "bad_request" }, 400);
    webhookRejected.inc({ receiver, reason });
    if (reason === "source_ip") {
      // The address nginx saw ($remote_addr in X-Real-IP); without one, the refusal is only counted.
      const address = forwardedAddress(c.req.header(FORWARDED_ADDRESS_HEADER));
      if (address !== null) deps.journal?.note(address, receiver);
    }
    const r = EDGE_REFUSALS[reason];
    return c.json({ error: r.error }, r.status);
  });
  return app;
}
