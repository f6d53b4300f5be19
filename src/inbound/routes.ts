// The robot webhook receivers (§10.1): POST /bitrix/sync/webhook/contact and .../alert. Thin: the
// checks run in a fixed order (docs/receivers.md), then SQL records the event durably and the reply
// is 200. No business work happens here.
//
// Nothing from the request's query string or body is ever logged, put in a reply, a label or a span:
// log lines carry a request id, the route, the receiver, the status and a safe reason code. Each
// request is a span (bitrix_sync.webhook.receive) with the inbox write as its child; the write's
// context is stored with the inbox row, so the event's processing is traced under it (§15, §16).
import { randomUUID } from "node:crypto";
import { isIP } from "node:net";
import type { HttpBindings } from "@hono/node-server";
import type { Context, MiddlewareHandler } from "hono";
import { Hono } from "hono";
import type pg from "pg";
import { cidrMatcher } from "../config/cidr.js";
import type { Logger } from "../observability/logger.js";
import { webhookRequests } from "../observability/metrics.js";
import { inSpan, markFailed, type Span, SpanKind, traceparentOf } from "../observability/tracing.js";
import { clientAddress, FORWARDED_ADDRESS_HEADER } from "./client-address.js";
import { RECEIVERS, type ReceiverConfig } from "./config.js";
import { checkToken, type PortalIdentity, parseRobotEvent, type RejectReason, rawQuery } from "./contract.js";
import { InboxWriter } from "./inbox.js";
import { secretMatcher } from "./token.js";

/** Where the receivers are mounted; the log `route` field is this plus the receiver name. */
export const RECEIVER_BASE_PATH = "/bitrix/sync/webhook";

export interface ReceiverDeps {
  pool: pg.Pool;
  log: Logger;
  /** Undefined: both receivers answer 503 receiver_not_configured. */
  config?: ReceiverConfig;
}

type Env = {
  Bindings: Partial<HttpBindings> | undefined;
  Variables: { body: Uint8Array; query: string; requestId: string; span: Span };
};

/** Outcome codes of a refused request: the only request-derived thing that is logged. */
type Reason =
  | RejectReason
  | "alert_entity_type_unset"
  | "body_too_large"
  | "body_unreadable"
  | "database_unavailable"
  | "entity_type"
  | "method_not_allowed"
  | "not_configured"
  | "query_too_large"
  | "unsupported_media_type";

const ERROR_BODY = {
  400: "bad_request",
  403: "forbidden",
  405: "method_not_allowed",
  413: "payload_too_large",
  414: "uri_too_long",
  415: "unsupported_media_type",
  503: "unavailable",
} as const;

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

/** The receiver routes, to be mounted with `app.route(RECEIVER_BASE_PATH, receiverRoutes(deps))`. */
export function receiverRoutes(deps: ReceiverDeps): Hono<Env> {
  const app = new Hono<Env>();
  const cfg = deps.config;
  const inbox = new InboxWriter(deps.pool, cfg?.inbox);
  const portal: PortalIdentity | undefined =
    cfg?.portalHost !== undefined && cfg.memberId !== undefined
      ? { host: cfg.portalHost.toLowerCase(), memberId: secretMatcher([cfg.memberId]) }
      : undefined;
  const trustedProxy = cidrMatcher(cfg?.trustedProxies ?? []);

  for (const receiver of RECEIVERS) {
    const route = `${RECEIVER_BASE_PATH}/${receiver}`;
    const tokens = cfg?.tokens[receiver];
    // No current token means the receiver is off: never accept without a token.
    const matcher = tokens?.current ? secretMatcher([tokens.current, tokens.previous]) : undefined;

    const reply = (c: Context<Env>, status: keyof typeof ERROR_BODY, reason: Reason, error?: string) => {
      const fields = {
        event: "receiver.rejected",
        requestId: c.get("requestId"),
        route,
        receiver,
        status,
        reason,
      };
      c.get("span")?.setAttribute("bitrix_sync.webhook.reason", reason);
      webhookRequests.inc({ receiver, result: reason });
      if (status === 503) deps.log.error(fields, "receiver request refused");
      else deps.log.warn(fields, "receiver request refused");
      const headers: Record<string, string> = { ...NO_STORE };
      if (status === 405) headers.allow = "POST";
      return c.json({ error: error ?? ERROR_BODY[status] }, status, headers);
    };

    // The request's span, a new trace: a robot sends no context, and one from outside is not trusted.
    const traced: MiddlewareHandler<Env> = (c, next) =>
      inSpan(
        "bitrix_sync.webhook.receive",
        () => ({
          root: true,
          kind: SpanKind.SERVER,
          attributes: {
            "http.request.method": spanMethod(c.req.method),
            "http.route": route,
            "bitrix_sync.webhook.receiver": receiver,
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

    // 1. method, 2. configured, 3. content type, 4. sizes: before anything is read or compared.
    const gate: MiddlewareHandler<Env> = async (c, next) => {
      if (c.req.method !== "POST") return reply(c, 405, "method_not_allowed");
      if (matcher === undefined || portal === undefined) {
        return reply(c, 503, "not_configured", "receiver_not_configured");
      }
      if (!isFormContentType(c.req.header("content-type"))) return reply(c, 415, "unsupported_media_type");
      const query = rawQuery(c.req.url);
      if (Buffer.byteLength(query) > (cfg?.maxQueryBytes ?? 0)) return reply(c, 414, "query_too_large");
      let body: Uint8Array | "too_large";
      try {
        body = await readBounded(c.req.raw, cfg?.maxBodyBytes ?? 0);
      } catch {
        return reply(c, 400, "body_unreadable");
      }
      if (body === "too_large") return reply(c, 413, "body_too_large");
      c.set("query", query);
      c.set("body", body);
      await next();
    };

    // 5. the token (403).
    const token: MiddlewareHandler<Env> = async (c, next) => {
      const refused = checkToken(c.get("query"), matcher as NonNullable<typeof matcher>);
      if (refused) return reply(c, refused.status, refused.reason);
      await next();
    };

    app.all(`/${receiver}`, traced, gate, token, async (c) => {
      // 6. the form and the document (400), 7. the portal identity (403).
      const ev = parseRobotEvent(receiver, c.get("query"), c.get("body"), portal as PortalIdentity);
      if (!ev.ok) return reply(c, ev.status, ev.reason);
      // 8. the entity type against settings and the durable insert, in SQL (grouped with the
      // requests that arrived together: one round trip and one commit).
      let inboxId: string;
      try {
        const sourceIp = clientAddress(
          peerAddress(c.env),
          c.req.header(FORWARDED_ADDRESS_HEADER),
          trustedProxy,
        );
        const out = await inSpan(
          "bitrix_sync.inbox.write",
          { attributes: { "bitrix_sync.webhook.receiver": receiver } },
          async (span) => {
            const o = await inbox.write({
              receiver,
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
        if (!out.accepted) {
          if (out.refusal === "entity_type") return reply(c, 400, "entity_type");
          return reply(c, 503, "alert_entity_type_unset", "receiver_not_configured");
        }
        inboxId = out.inboxId;
      } catch (e) {
        // Only the SQLSTATE: the message or detail of a database error may quote the parameters.
        const code = (e as { code?: unknown }).code;
        deps.log.error(
          {
            event: "receiver.insert_failed",
            requestId: c.get("requestId"),
            route,
            receiver,
            sqlstate: typeof code === "string" ? code : undefined,
          },
          "could not record the webhook",
        );
        return reply(c, 503, "database_unavailable");
      }
      webhookRequests.inc({ receiver, result: "accepted" });
      deps.log.debug(
        { event: "receiver.accepted", requestId: c.get("requestId"), route, receiver, inboxId },
        "webhook recorded",
      );
      return c.json({ status: "accepted" }, 200, NO_STORE);
    });
  }
  return app;
}
