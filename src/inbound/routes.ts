// The robot webhook receivers (§10.1): POST /bitrix/sync/webhook/contact and .../alert. Thin: the
// checks run in a fixed order (docs/receivers.md), then SQL records the event durably and the reply
// is 200. No business work happens here.
//
// Nothing from the request's query string or body is ever logged, put in a reply, a label or a span:
// log lines carry a request id, the route, the receiver, the status and a safe reason code.
// Refusals are logged sampled (the first few per receiver and reason a minute, then one line with
// the count); the metric counts every one. Each request is a span (bitrix_sync.webhook.receive)
// with the inbox write as its child; the write's context is stored with the inbox row, so the
// event's processing is traced under it (§15, §16).
import { randomUUID } from "node:crypto";
import { isIP } from "node:net";
import type { HttpBindings } from "@hono/node-server";
import type { Context, Handler, MiddlewareHandler } from "hono";
import { Hono } from "hono";
import { cidrMatcher } from "../config/cidr.js";
import { RECEIVERS, type ReceiverName } from "../config/receivers.js";
import { isTimeout } from "../db/deadline.js";
import { LogSampler } from "../observability/log-sampler.js";
import type { Logger } from "../observability/logger.js";
import { webhookAccepted, webhookRejected } from "../observability/metrics.js";
import { inSpan, markFailed, type Span, SpanKind, traceparentOf } from "../observability/tracing.js";
import { clientAddress, FORWARDED_ADDRESS_HEADER } from "./client-address.js";
import type { ReceiverConfig } from "./config.js";
import { type PortalIdentity, parseRobotEvent, type RobotEvent, rawQuery } from "./contract.js";
import { InboxBusyError, type InboxRefusal, type InboxWriter } from "./inbox.js";
import { type ErrorOf, RECEIVER_REFUSALS, type ReasonOf, type RefusalStatus } from "./refusals.js";
import { secretMatcher } from "./token.js";
import { receiverToken } from "./token-check.js";

/** Where the receivers are mounted; the log `route` field is this plus the receiver name. */
export const RECEIVER_BASE_PATH = "/bitrix/sync/webhook";

export interface ReceiverDeps {
  /** The grouped inbox writer, on the receiver pool (src/db/pools.ts). */
  inbox: InboxWriter;
  log: Logger;
  /** Undefined: both receivers answer 503 receiver_not_configured. */
  config?: ReceiverConfig;
  /** Refusal log lines per receiver and reason and window (default 10 a minute). */
  logSampling?: { perWindow?: number; windowMs?: number };
}

type Env = {
  Bindings: Partial<HttpBindings> | undefined;
  Variables: { body: Uint8Array; query: string; requestId: string; span: Span; event: RobotEvent };
};

/** The body's error code of each refusal status (the first listed; 503 may also say receiver_not_configured). */
const ERROR_BODY = Object.fromEntries(
  Object.entries(RECEIVER_REFUSALS).map(([status, r]) => [status, r.errors[0]]),
) as { [S in RefusalStatus]: ErrorOf<S> };

const NO_STORE = { "cache-control": "no-store" };

/** The request method for a span: a client can send any token, so unknown ones are folded. */
const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"]);
const spanMethod = (m: string) => (METHODS.has(m) ? m : "_OTHER");

/** The peer address of the TCP connection (never a header), IPv4-mapped IPv6 unwrapped. */
export function peerAddress(bindings: Partial<HttpBindings> | undefined): string | null {
  const raw = bindings?.incoming?.socket?.remoteAddress;
  if (typeof raw !== "string") return null;
  const addr = raw.startsWith("::ffff:") && isIP(raw.slice(7)) === 4 ? raw.slice(7) : raw;
  return isIP(addr) === 0 ? null : addr;
}

const FORM = "application/x-www-form-urlencoded";

/** `application/x-www-form-urlencoded`, optionally with `charset=utf-8`; nothing else. */
export function isFormContentType(header: string | undefined): boolean {
  if (header === undefined) return false;
  const [type, ...params] = header.split(";");
  if (type?.trim().toLowerCase() !== FORM) return false;
  for (const p of params) {
    const [k, v, extra] = p.split("=");
    if (extra !== undefined || k?.trim().toLowerCase() !== "charset") return false;
    if (
      v
        ?.trim()
        .replace(/^"(.*)"$/, "$1")
        .toLowerCase() !== "utf-8"
    )
      return false;
  }
  return true;
}

async function readBounded(req: Request, limit: number): Promise<Uint8Array | "too_large"> {
  const length = req.headers.get("content-length");
  if (length !== null) {
    // Node's HTTP parser holds the body to this length, so the buffered fast path is bounded too.
    if (!/^\d{1,12}$/.test(length) || Number(length) > limit) return "too_large";
    return new Uint8Array(await req.arrayBuffer());
  }
  if (req.body === null) return new Uint8Array(0);
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      return "too_large";
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return chunks[0] as Uint8Array;
  const out = new Uint8Array(size);
  let at = 0;
  for (const ch of chunks) {
    out.set(ch, at);
    at += ch.byteLength;
  }
  return out;
}

/** Writes a log line unless its kind was already logged often enough in this window. */
type LogSampled = (key: string, fields: Record<string, unknown>, error: boolean, message: string) => void;

/** Answers a refusal: the span's reason, the metric, a sampled log line and the JSON body. */
type Reply = <S extends RefusalStatus>(
  c: Context<Env>,
  status: S,
  reason: ReasonOf<S>,
  error?: ErrorOf<S>,
) => Response;

/** One receiver route as its middleware sees it. */
interface Receiver {
  name: ReceiverName;
  /** The log `route` field and the span's http.route. */
  route: string;
  reply: Reply;
  logSampled: LogSampled;
}

/** Refusal and failure lines, sampled per key; a suppressed count is logged with the same safe fields. */
function sampledLog(deps: ReceiverDeps): LogSampled {
  // What each sampling key logs, so the summary line carries the same safe fields.
  const sampled = new Map<string, { fields: Record<string, unknown>; error: boolean }>();
  const sampler = new LogSampler({
    ...deps.logSampling,
    onSuppressed: (key, suppressed, windowMs) => {
      const k = sampled.get(key);
      if (!k) return;
      const fields = {
        ...k.fields,
        event: `${k.fields.event}.suppressed`,
        suppressed,
        windowSec: windowMs / 1000,
      };
      const message = "more receiver requests like this in the last window; counted, not logged one by one";
      if (k.error) deps.log.error(fields, message);
      else deps.log.warn(fields, message);
    },
  });
  return (key, fields, error, message) => {
    if (!sampler.admit(key)) return;
    if (!sampled.has(key)) sampled.set(key, { fields, error });
    if (error) deps.log.error(fields, message);
    else deps.log.warn(fields, message);
  };
}

/** The refusal reply of one receiver route. */
function refusalReply(name: ReceiverName, route: string, logSampled: LogSampled): Reply {
  return (c, status, reason, error) => {
    const fields = {
      event: "receiver.rejected",
      requestId: c.get("requestId"),
      route,
      receiver: name,
      status,
      reason,
    };
    c.get("span")?.setAttribute("bitrix_sync.webhook.reason", reason);
    webhookRejected.inc({ receiver: name, reason });
    logSampled(`rejected:${name}:${status}:${reason}`, fields, status === 503, "receiver request refused");
    const headers: Record<string, string> = { ...NO_STORE };
    if (status === 405) headers.allow = "POST";
    return c.json({ error: error ?? ERROR_BODY[status] }, status, headers);
  };
}

/** The request's span, a new trace: a robot sends no context, and one from outside is not trusted. */
function traced(r: Receiver): MiddlewareHandler<Env> {
  return (c, next) =>
    inSpan(
      "bitrix_sync.webhook.receive",
      () => ({
        root: true,
        kind: SpanKind.SERVER,
        attributes: {
          "http.request.method": spanMethod(c.req.method),
          "http.route": r.route,
          "bitrix_sync.webhook.receiver": r.name,
        },
      }),
      async (span) => {
        c.set("requestId", randomUUID());
        c.set("span", span);
        await next();
        span.setAttribute("http.response.status_code", c.res.status);
        if (c.res.status >= 500) markFailed(span, String(c.res.status));
      },
    );
}

/**
 * 1. method, 2. configured, 3. content type, 4. sizes: before anything is read or compared. Sets the
 * raw query and the body read within its bound.
 */
function gate(r: Receiver, configured: boolean, cfg: ReceiverConfig | undefined): MiddlewareHandler<Env> {
  return async (c, next) => {
    if (c.req.method !== "POST") return r.reply(c, 405, "method_not_allowed");
    if (!configured) return r.reply(c, 503, "not_configured", "receiver_not_configured");
    if (!isFormContentType(c.req.header("content-type"))) return r.reply(c, 415, "unsupported_media_type");
    const query = rawQuery(c.req.url);
    if (Buffer.byteLength(query) > (cfg?.maxQueryBytes ?? 0)) return r.reply(c, 414, "query_too_large");
    let body: Uint8Array | "too_large";
    try {
      body = await readBounded(c.req.raw, cfg?.maxBodyBytes ?? 0);
    } catch {
      return r.reply(c, 400, "body_unreadable");
    }
    if (body === "too_large") return r.reply(c, 413, "body_too_large");
    c.set("query", query);
    c.set("body", body);
    await next();
  };
}

/** 6. the form and the document (400), 7. the portal identity (403). Sets the event. */
function parsed(r: Receiver, portal: PortalIdentity): MiddlewareHandler<Env> {
  return async (c, next) => {
    const ev = parseRobotEvent(r.name, c.get("query"), c.get("body"), portal);
    if (!ev.ok) return r.reply(c, ev.status, ev.reason);
    c.set("event", ev);
    await next();
  };
}

/** The inbox write of one event, its own span (the context stored with the row). */
async function writeInbox(r: Receiver, inbox: InboxWriter, ev: RobotEvent, sourceIp: string | null) {
  return await inSpan(
    "bitrix_sync.inbox.write",
    { attributes: { "bitrix_sync.webhook.receiver": r.name } },
    async (span) => {
      const o = await inbox.write({
        receiver: r.name,
        entityTypeId: ev.entityTypeId,
        entityId: ev.entityId,
        sourceIp,
        traceContext: traceparentOf(span),
      });
      span.setAttribute("bitrix_sync.inbox.group_size", o.group);
      if (o.accepted) span.setAttribute("bitrix_sync.inbox.id", o.inboxId);
      else span.setAttribute("bitrix_sync.outcome", o.refusal);
      return o;
    },
  );
}

/** The reply to an event SQL would not record. */
function inboxRefused(r: Receiver, c: Context<Env>, refusal: InboxRefusal): Response {
  switch (refusal) {
    case "entity_type":
    case "entity_id":
      return r.reply(c, 400, refusal);
    case "alert_entity_type_unset":
    case "alert_config_invalid":
      return r.reply(c, 503, refusal, "receiver_not_configured");
    case "unknown_receiver":
      return r.reply(c, 503, refusal);
  }
}

/** The reply when the inbox write failed: nothing was written for this event. */
function inboxFailed(r: Receiver, c: Context<Env>, e: unknown): Response {
  // docs/receivers.md, "Bounded waits": the robot does not retry, and Contact reconciliation picks
  // the change up.
  if (e instanceof InboxBusyError) return r.reply(c, 503, e.reason);
  // Only the SQLSTATE: the message or detail of a database error may quote the parameters.
  const code = (e as { code?: unknown }).code;
  const sqlstate = typeof code === "string" ? code : undefined;
  r.logSampled(
    `insert_failed:${r.name}:${sqlstate}`,
    {
      event: "receiver.insert_failed",
      requestId: c.get("requestId"),
      route: r.route,
      receiver: r.name,
      sqlstate,
    },
    true,
    "could not record the webhook",
  );
  return r.reply(c, 503, isTimeout(e) ? "database_timeout" : "database_unavailable");
}

/**
 * 8. the entity type against settings and the durable insert, in SQL (grouped with the requests that
 * arrived together: one round trip and one commit); 200 once it is recorded.
 */
function recorded(r: Receiver, deps: ReceiverDeps, trustedProxy: (addr: string) => boolean): Handler<Env> {
  return async (c) => {
    let inboxId: string;
    try {
      const sourceIp = clientAddress(
        peerAddress(c.env),
        c.req.header(FORWARDED_ADDRESS_HEADER),
        trustedProxy,
      );
      const out = await writeInbox(r, deps.inbox, c.get("event"), sourceIp);
      if (!out.accepted) return inboxRefused(r, c, out.refusal);
      inboxId = out.inboxId;
    } catch (e) {
      return inboxFailed(r, c, e);
    }
    webhookAccepted.inc({ receiver: r.name });
    deps.log.debug(
      {
        event: "receiver.accepted",
        requestId: c.get("requestId"),
        route: r.route,
        receiver: r.name,
        inboxId,
      },
      "webhook recorded",
    );
    return c.json({ status: "accepted" }, 200, NO_STORE);
  };
}

/**
 * The receiver routes, to be mounted with `app.route(RECEIVER_BASE_PATH, receiverRoutes(deps))`: per
 * receiver the span, the gate, the token (5., 403), the event, and its record.
 */
export function receiverRoutes(deps: ReceiverDeps): Hono<Env> {
  const app = new Hono<Env>();
  const cfg = deps.config;
  const logSampled = sampledLog(deps);
  const portal: PortalIdentity | undefined =
    cfg?.portalHost !== undefined && cfg.memberId !== undefined
      ? { host: cfg.portalHost.toLowerCase(), memberId: secretMatcher([cfg.memberId]) }
      : undefined;
  const trustedProxy = cidrMatcher(cfg?.trustedProxies ?? []);

  for (const name of RECEIVERS) {
    const route = `${RECEIVER_BASE_PATH}/${name}`;
    const r: Receiver = { name, route, reply: refusalReply(name, route, logSampled), logSampled };
    const tokens = cfg?.tokens[name];
    // No current token means the receiver is off: never accept without a token.
    const matcher = tokens?.current ? secretMatcher([tokens.current, tokens.previous]) : undefined;
    const configured = matcher !== undefined && portal !== undefined;
    const token = receiverToken<Env>(matcher ?? (() => false), (c, status, reason) =>
      r.reply(c, status, reason),
    );
    app.all(
      `/${name}`,
      traced(r),
      gate(r, configured, cfg),
      token,
      parsed(r, portal as PortalIdentity),
      recorded(r, deps, trustedProxy),
    );
  }
  return app;
}
