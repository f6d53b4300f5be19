// The HTTP call to the portal as a span (bitrix_sync.crm.http, docs/observability.md). What it
// records is the REST method, the portal host (configuration, not a secret), the status or the
// transport's fixed error code and whether the request had left. Never the URL: its path holds the
// webhook secret (§16).
import { SpanKind } from "@opentelemetry/api";
import { inSpan, markFailed } from "../observability/tracing.js";
import type { CrmClient } from "./client.js";

/** host[:port] of BITRIX_SYNC_PORTAL_HOST, split for server.address and server.port. */
function serverOf(portalHost: string): { address: string; port: number } {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d{1,5}))?$/.exec(portalHost.toLowerCase());
  return { address: m?.[1] ?? portalHost, port: m?.[2] ? Number(m[2]) : 443 };
}

/** The client with every call traced. */
export function tracedClient(client: CrmClient): CrmClient {
  const server = serverOf(client.portalHost);
  return {
    portalHost: client.portalHost,
    close: () => client.close(),
    call(method, params, opts) {
      return inSpan(
        "bitrix_sync.crm.http",
        {
          kind: SpanKind.CLIENT,
          attributes: {
            "http.request.method": "POST",
            "server.address": server.address,
            "server.port": server.port,
            "bitrix_sync.crm.method": method,
          },
        },
        async (span) => {
          const r = await client.call(method, params, opts);
          if (r.type === "network") {
            span.setAttribute("bitrix_sync.crm.request_sent", r.sent);
            markFailed(span, r.code);
          } else {
            span.setAttribute("http.response.status_code", r.status);
            if (r.type === "malformed") markFailed(span, "malformed_reply");
            else if (r.status >= 400) markFailed(span, String(r.status));
          }
          return r;
        },
      );
    },
  };
}
