// Spans through @opentelemetry/api only (docs/observability.md). Until src/observability/
// tracing-sdk.ts registers an SDK (OTEL_EXPORTER_OTLP_ENDPOINT set), every helper here returns at its
// first line: no span, no context, not even the API's no-op objects are made on the hot paths
// (npm run bench:tracing measures it).
//
// What may go into a span (§15, §16): fixed span names, low-cardinality attributes, internal IDs
// (workflow, command, inbox, intent and correlation IDs: UUIDs and bigints of this service, not
// personal data) and safe codes. Never a user ID, a Contact ID, a phone, a name, an e-mail, a token,
// a URL with its path, a request or reply body, or an exception's message.
import {
  type Attributes,
  type Context,
  context,
  INVALID_SPAN_CONTEXT,
  isSpanContextValid,
  type Link,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  type TimeInput,
  trace,
} from "@opentelemetry/api";

export type { Span };
export { SpanKind };

/** The tracer every span of the service comes from. */
export const tracer = trace.getTracer("bitrix-sync");

let enabled = false;

/** What the helpers hand out while tracing is off: one shared span whose methods do nothing. */
const OFF_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Set by the SDK's start and shutdown: while false, context helpers do no work at all. */
export function setTracingEnabled(on: boolean): void {
  enabled = on;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The W3C traceparent of `span` (what the database stores), or null when it is not a real span. */
export function traceparentOf(span: Span | undefined): string | null {
  if (!enabled || span === undefined) return null;
  const sc = span.spanContext();
  if (!isSpanContextValid(sc)) return null;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** The traceparent of the active span: the context a row written now is stored with. */
export function activeTraceparent(): string | null {
  return enabled ? traceparentOf(trace.getActiveSpan()) : null;
}

/** The span context a stored traceparent names, as a remote parent; null for none or a bad one. */
export function spanContextOf(traceparent: string | null | undefined): SpanContext | null {
  if (!enabled || !traceparent) return null;
  const m = TRACEPARENT.exec(traceparent);
  if (!m) return null;
  const sc: SpanContext = {
    traceId: m[1] as string,
    spanId: m[2] as string,
    traceFlags: Number.parseInt(m[3] as string, 16) & 0x01,
    isRemote: true,
  };
  return isSpanContextValid(sc) ? sc : null;
}

/** The context to start a span under: the stored parent, or none (a new trace). */
export function storedParent(traceparent: string | null | undefined): Context {
  const sc = spanContextOf(traceparent);
  return sc ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

/** Links to spans of other traces (a batch serving many intents); none while tracing is off. */
export function linksTo(targets: ReadonlyArray<Span | SpanContext | null | undefined>): Link[] {
  if (!enabled) return [];
  const out: Link[] = [];
  for (const t of targets) {
    if (!t) continue;
    const sc = "spanContext" in t ? t.spanContext() : t;
    if (isSpanContextValid(sc)) out.push({ context: sc });
  }
  return out;
}

/**
 * The log fields of the active span (the logger's mixin): trace_id and span_id, or none. A new object
 * every time: pino merges the line's own fields into it.
 */
export function traceLogFields(): { trace_id?: string; span_id?: string } {
  if (!enabled) return {};
  const span = trace.getActiveSpan();
  if (span === undefined) return {};
  const sc = span.spanContext();
  return isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : {};
}

/**
 * A safe code for a failure: the SQLSTATE, the classifier's code, or the error's class name. Never
 * the message, which may quote parameters or data.
 */
export function safeErrorCode(e: unknown): string {
  if (typeof e === "object" && e !== null) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && /^[A-Za-z0-9_.]{1,64}$/.test(code)) return code;
  }
  return e instanceof Error ? e.name : typeof e;
}

/** Marks a span failed with a safe code (status ERROR, attribute error.type); no message, no event. */
export function markFailed(span: Span, code: string): void {
  span.setAttribute("error.type", code);
  span.setStatus({ code: SpanStatusCode.ERROR });
}

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  links?: Link[];
  /** When the span began, if before the call (the trigger-to-intake hop). */
  startTime?: TimeInput;
  /** Start under this context instead of the active one (a stored parent). */
  parent?: Context;
  /** Start a new trace, whatever is active. */
  root?: boolean;
}

/**
 * Runs `fn` in a new active span that ends when `fn` settles. A throw marks the span failed with a
 * safe code and is rethrown unchanged. `opts` as a function is called only while tracing is on, so
 * the hot paths build no attributes otherwise.
 */
export function inSpan<T>(
  name: string,
  opts: SpanOptions | (() => SpanOptions),
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  if (!enabled) return fn(OFF_SPAN);
  const { parent, ...spanOpts } = typeof opts === "function" ? opts() : opts;
  return tracer.startActiveSpan(name, spanOpts, parent ?? context.active(), async (span) => {
    try {
      return await fn(span);
    } catch (e) {
      markFailed(span, safeErrorCode(e));
      throw e;
    } finally {
      span.end();
    }
  });
}

/** Starts a span that the caller ends (one that outlives a call, such as a command's send). */
export function startSpan(name: string, opts: SpanOptions | (() => SpanOptions)): Span {
  if (!enabled) return OFF_SPAN;
  const { parent, ...spanOpts } = typeof opts === "function" ? opts() : opts;
  return tracer.startSpan(name, spanOpts, parent ?? context.active());
}

/** Runs `fn` with `span` active, so the log lines and child spans it makes belong to it. */
export function withSpan<T>(span: Span, fn: () => T): T {
  if (!enabled) return fn();
  return context.with(trace.setSpan(context.active(), span), fn);
}
