// The tracing helpers and the logger's trace fields and masking (docs/observability.md): while no
// SDK is registered every helper is inert; with one, a stored traceparent round-trips, a malformed
// one is refused, a failure is recorded as a safe code only, and a log line written inside a span
// carries its ids. Serial: the SDK is registered once, half-way through.
import { Writable } from "node:stream";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import test from "ava";
import { createLogger } from "../../../src/observability/logger.js";
import {
  activeTraceparent,
  inSpan,
  linksTo,
  setTracingEnabled,
  spanContextOf,
  storedParent,
  traceLogFields,
  traceparentOf,
  tracer,
} from "../../../src/observability/tracing.js";
import { tracesUrl } from "../../../src/observability/tracing-sdk.js";

const VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
      cb();
    },
  });
  return { lines, log: createLogger({ level: "debug", destination: sink }) };
}

test.serial("without an SDK every helper is inert and log lines carry no trace ids", async (t) => {
  const span = tracer.startSpan("x");
  t.is(traceparentOf(span), null);
  span.end();
  t.is(spanContextOf(VALID), null, "a stored context is not even parsed");
  t.is(trace.getSpanContext(storedParent(VALID)), undefined);
  t.deepEqual(linksTo([span]), []);
  const { lines, log } = capture();
  await inSpan("y", {}, async () => {
    t.is(activeTraceparent(), null);
    t.deepEqual(traceLogFields(), {});
    log.info({ event: "inside" }, "inside a no-op span");
  });
  t.false("trace_id" in (lines[0] ?? {}));
});

const exporter = new InMemorySpanExporter();

test.serial("with an SDK: a traceparent round-trips as a remote parent", (t) => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(
    new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }),
  );
  setTracingEnabled(true);
  const span = tracer.startSpan("stored");
  const tp = traceparentOf(span);
  t.regex(tp ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  const sc = spanContextOf(tp);
  t.is(sc?.traceId, span.spanContext().traceId);
  t.is(sc?.spanId, span.spanContext().spanId);
  t.true(sc?.isRemote);
  const child = tracer.startSpan("child", {}, storedParent(tp));
  t.is(child.spanContext().traceId, span.spanContext().traceId);
  child.end();
  span.end();
  t.is(exporter.getFinishedSpans().find((s) => s.name === "child")?.parentSpanContext?.spanId, sc?.spanId);
});

test.serial("a malformed or empty stored context starts a new trace instead", (t) => {
  for (const bad of [
    "",
    "garbage",
    VALID.toUpperCase(),
    `ff${VALID.slice(2)}`,
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    `${VALID}-extra`,
  ]) {
    t.is(spanContextOf(bad), null, bad);
    t.is(trace.getSpanContext(storedParent(bad)), undefined, bad);
  }
  t.is(spanContextOf(null), null);
});

test.serial("a failed span records a safe code, never the error's message", async (t) => {
  exporter.reset();
  const err = Object.assign(new Error("value +79991234567 is bad"), { code: "23514" });
  await t.throwsAsync(inSpan("fails", {}, async () => Promise.reject(err)));
  await t.throwsAsync(inSpan("fails too", {}, async () => Promise.reject(new TypeError("Anna Ivanova"))));
  const [a, b] = exporter.getFinishedSpans();
  t.is(a?.attributes["error.type"], "23514");
  t.is(a?.status.code, 2);
  t.is(b?.attributes["error.type"], "TypeError");
  t.deepEqual(a?.events, []);
  t.false(JSON.stringify([a?.attributes, a?.status, b?.attributes, b?.status]).includes("7999"));
  t.false(JSON.stringify([b?.attributes, b?.status]).includes("Anna"));
});

test.serial("a log line written inside a span carries its trace_id and span_id; outside, none", async (t) => {
  const { lines, log } = capture();
  let ids = { traceId: "", spanId: "" };
  await inSpan("logs", {}, async (span) => {
    ids = span.spanContext();
    await new Promise((r) => setTimeout(r, 1));
    log.info({ event: "inside" }, "after an await, still inside");
  });
  log.info({ event: "outside" }, "outside");
  t.is(lines[0]?.trace_id, ids.traceId);
  t.is(lines[0]?.span_id, ids.spanId);
  t.false("trace_id" in (lines[1] ?? {}));
});

test.serial("links name only real spans", (t) => {
  const a = tracer.startSpan("a");
  const links = linksTo([
    a,
    null,
    undefined,
    trace.wrapSpanContext({ traceId: "0".repeat(32), spanId: "0".repeat(16), traceFlags: 0 }),
  ]);
  t.is(links.length, 1);
  t.is(links[0]?.context.spanId, a.spanContext().spanId);
  a.end();
});

test("the logger masks personal values to two characters each side and redacts secrets", (t) => {
  const { lines, log } = capture();
  log.info(
    {
      event: "x",
      phone: "+79991234567",
      email: "anna.ivanova@example.com",
      userId: "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
      token: "contact-token-5f0b3c1e",
      nested: { name: "Anna Ivanova", webhookUrl: "https://p.bitrix24.ru/rest/1/secret/" },
    },
    "m",
  );
  const l = lines[0] as Record<string, unknown>;
  t.is(l.phone, "+7********67");
  t.is(l.email, "an********************om");
  t.is(l.userId, "3f********************************01");
  t.is(l.token, "[redacted]");
  t.deepEqual(l.nested, { name: "An********va", webhookUrl: "[redacted]" });
});

test("the traces URL is the endpoint plus /v1/traces, as OTLP/HTTP builds it", (t) => {
  t.is(tracesUrl("http://collector:4318"), "http://collector:4318/v1/traces");
  t.is(tracesUrl("http://collector:4318/"), "http://collector:4318/v1/traces");
  t.is(tracesUrl("https://c.example/otlp/"), "https://c.example/otlp/v1/traces");
});
