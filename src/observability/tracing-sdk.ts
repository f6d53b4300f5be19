// The OpenTelemetry SDK, started only when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observability.md):
// a tracer provider with a batch span processor and the OTLP/HTTP (JSON) exporter, and an
// AsyncLocalStorage context manager so spans nest across awaits. Without the variable nothing here is
// even loaded, and the API in src/observability/tracing.ts stays a no-op.
//
// A collector that is down, slow or refusing must never slow or break the service (§18): spans wait
// in a bounded queue (dropped when it is full), each export has a deadline, failures are logged at
// most once a minute with a safe code, and shutdown waits for the last flush only within its bound.
import { context, trace } from "@opentelemetry/api";
import type { SpanExporter } from "@opentelemetry/sdk-trace";
import type { Logger } from "./logger.js";
import { safeErrorCode, setTracingEnabled } from "./tracing.js";

/** One export request's deadline. */
const EXPORT_TIMEOUT_MS = 5_000;
/** At most this many finished spans wait for export; more are dropped. */
const MAX_QUEUE = 4_096;
/** Spans per export request. */
const EXPORT_BATCH = 512;
const FAILURE_LOG_EVERY_MS = 60_000;

export interface TracingOptions {
  /** OTEL_EXPORTER_OTLP_ENDPOINT: the collector's base URL; /v1/traces is appended (OTLP/HTTP). */
  endpoint: string | undefined;
  serviceVersion: string;
  /** The commit the build came from (src/version.ts), as the resource's vcs.ref.head.revision. */
  serviceRevision?: string;
  environment: string | undefined;
  log: Logger;
  /** How long to wait between exports of a non-full batch. Default 1 000 ms. */
  scheduledDelayMs?: number;
}

export interface Tracing {
  /** Flushes what is queued and stops exporting; resolves within `timeoutMs` whatever the collector does. */
  shutdown(timeoutMs: number): Promise<void>;
}

/**
 * The resource attribute that names the build's commit: OpenTelemetry's semantic convention for the
 * revision of a version-control reference (there is no service.* one for it).
 */
export const REVISION_ATTRIBUTE = "vcs.ref.head.revision";

/** The OTLP/HTTP traces URL of a base endpoint, as the OpenTelemetry specification builds it. */
export function tracesUrl(endpoint: string): string {
  return `${endpoint.replace(/\/+$/, "")}/v1/traces`;
}

/** Starts the SDK when an endpoint is configured; returns null (and loads nothing) otherwise. */
export async function startTracing(opts: TracingOptions): Promise<Tracing | null> {
  if (!opts.endpoint) return null;
  const [sdk, otlp, hooks, resources] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/resources"),
  ]);
  const exporter = new otlp.OTLPTraceExporter({
    url: tracesUrl(opts.endpoint),
    timeoutMillis: EXPORT_TIMEOUT_MS,
    // Requests in flight at once (a burst or a flush sends several batches together); past it a
    // batch is dropped, so a hanging collector holds at most this many.
    concurrencyLimit: 32,
  });
  let lastFailureLog = 0;
  let failures = 0;
  // The SDK reports a failed export only to its diagnostics; this wrapper gives operators one line.
  const observed: SpanExporter = {
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush(),
    export: (spans, done) =>
      exporter.export(spans, (result) => {
        if (result.code !== 0) {
          failures++;
          const now = Date.now();
          if (now - lastFailureLog >= FAILURE_LOG_EVERY_MS) {
            lastFailureLog = now;
            opts.log.warn(
              {
                event: "tracing.export_failed",
                code: result.error ? safeErrorCode(result.error) : "unknown",
                failures,
                spans: spans.length,
              },
              "could not export spans to the collector; the service carries on and drops what it cannot send",
            );
          }
        }
        done(result);
      }),
  };
  const processor = new sdk.BatchSpanProcessor({
    exporter: observed,
    maxQueueSize: MAX_QUEUE,
    maxExportBatchSize: EXPORT_BATCH,
    scheduledDelayMillis: opts.scheduledDelayMs ?? 1_000,
    exportTimeoutMillis: EXPORT_TIMEOUT_MS,
  });
  const provider = new sdk.TracerProvider({
    resource: resources.resourceFromAttributes({
      "service.name": "bitrix-sync",
      "service.version": opts.serviceVersion,
      ...(opts.serviceRevision ? { [REVISION_ATTRIBUTE]: opts.serviceRevision } : {}),
      ...(opts.environment ? { "deployment.environment.name": opts.environment } : {}),
    }),
    spanProcessors: [processor],
  });
  const contextManager = new hooks.AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  trace.setGlobalTracerProvider(provider);
  setTracingEnabled(true);
  // The endpoint is configuration and may carry credentials: it is not logged.
  opts.log.info({ event: "tracing.started", exporter: "otlp-http" }, "exporting traces (OTLP/HTTP)");

  let stopped: Promise<void> | null = null;
  return {
    shutdown(timeoutMs) {
      stopped ??= (async () => {
        let timer: NodeJS.Timeout | undefined;
        const bound = new Promise<"timeout">((resolve) => {
          timer = setTimeout(() => resolve("timeout"), Math.max(0, timeoutMs));
        });
        const flushed = provider.shutdown().then(
          () => "flushed" as const,
          () => "failed" as const,
        );
        const how = await Promise.race([flushed, bound]);
        clearTimeout(timer);
        setTracingEnabled(false);
        trace.disable();
        context.disable();
        if (how !== "flushed") {
          opts.log.warn(
            { event: "tracing.flush_incomplete", code: how },
            "spans not exported before shutdown were dropped",
          );
        }
      })();
      return stopped;
    },
  };
}
