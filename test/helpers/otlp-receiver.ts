// An OTLP/HTTP trace receiver for tests: a node:http server on loopback that accepts what the
// service's exporter POSTs to /v1/traces (OTLP JSON), keeps every raw byte for leak greps, and
// decodes the spans into a flat list. It can also play a collector that is down: "hang" accepts the
// connection and never answers.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type AttributeValue = string | number | boolean | Array<string | number | boolean>;

export interface ExportedSpan {
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, AttributeValue>;
  links: Array<{ traceId: string; spanId: string }>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  status: number;
  resource: Record<string, AttributeValue>;
}

export interface OtlpReceiver {
  /** The base URL to put in OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  /** Every request body received, as sent. */
  bodies: Buffer[];
  spans: ExportedSpan[];
  /** ok: answer 200; hang: keep the request open and never answer. */
  setMode(mode: "ok" | "hang"): void;
  /** Requests received, whatever the mode. */
  requests(): number;
  close(): Promise<void>;
}

type OtlpValue = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: OtlpValue[] };
};
type OtlpKeyValue = { key: string; value: OtlpValue };

function scalar(v: OtlpValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  return "";
}

function attributes(list: OtlpKeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const { key, value } of list ?? []) {
    out[key] = value.arrayValue ? (value.arrayValue.values ?? []).map(scalar) : scalar(value);
  }
  return out;
}

/** OTLP JSON carries ids as hex; base64 is accepted too, in case an exporter sends protobuf-style ids. */
function hexId(id: string | undefined): string {
  if (!id) return "";
  if (/^[0-9a-f]+$/i.test(id)) return id.toLowerCase();
  return Buffer.from(id, "base64").toString("hex");
}

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: OtlpKeyValue[];
  links?: Array<{ traceId: string; spanId: string }>;
  status?: { code?: number };
}

/** The spans of one OTLP JSON export request. */
export function decodeOtlpJson(body: Buffer): ExportedSpan[] {
  const doc = JSON.parse(body.toString("utf8")) as {
    resourceSpans?: Array<{
      resource?: { attributes?: OtlpKeyValue[] };
      scopeSpans?: Array<{ spans?: OtlpSpan[] }>;
    }>;
  };
  const out: ExportedSpan[] = [];
  for (const rs of doc.resourceSpans ?? []) {
    const resource = attributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: hexId(s.traceId),
          spanId: hexId(s.spanId),
          parentSpanId: hexId(s.parentSpanId),
          name: s.name,
          kind: s.kind ?? 0,
          startNs: BigInt(s.startTimeUnixNano),
          endNs: BigInt(s.endTimeUnixNano),
          attributes: attributes(s.attributes),
          links: (s.links ?? []).map((l) => ({ traceId: hexId(l.traceId), spanId: hexId(l.spanId) })),
          status: s.status?.code ?? 0,
          resource,
        });
      }
    }
  }
  return out;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const bodies: Buffer[] = [];
  const spans: ExportedSpan[] = [];
  let mode: "ok" | "hang" = "ok";
  let count = 0;
  const held = new Set<ServerResponse>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    count++;
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      if (mode === "hang") {
        held.add(res);
        res.on("close", () => held.delete(res));
        return;
      }
      bodies.push(body);
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end();
        return;
      }
      try {
        spans.push(...decodeOtlpJson(body));
      } catch {
        res.writeHead(400, { "content-type": "application/json" }).end("{}");
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bodies,
    spans,
    setMode(m) {
      mode = m;
    },
    requests: () => count,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
