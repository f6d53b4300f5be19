// `npm run bench:tracing`: what tracing costs on the hot paths (issue 12, docs/observability.md).
//
// Part 1, per unit of work, in ns: the exact sequence of tracing calls the service makes for one
// receiver request, one workflow step and one batch of 20 command sends, around an empty async body,
// measured (a) without any tracing call, (b) with those calls and tracing off (what runs when
// OTEL_EXPORTER_OTLP_ENDPOINT is unset: the helpers return before calling the API), (c) with the SDK
// exporting to a collector on loopback, and
// (d) with the SDK and a collector that refuses connections. Each mode runs in its own process (an SDK
// registration is for the life of a process). Two figures per unit: the wall time of the unit itself
// (what a request or a step waits), and the process's CPU time including the export of every span
// made (a flush after each round; CPU time counts the garbage collector's threads too).
//
// Part 2, end to end: `npm run bench:receiver`'s server (durable inbox inserts over HTTP, real
// PostgreSQL) without and with the SDK exporting to the loopback collector: requests/s and p99.
//
// Knobs: BENCH_ROUNDS (default 7), BENCH_OPS (ops per round, default 2000), BENCH_REQUESTS (part 2,
// default 20000; 0 skips part 2). Prints numbers, asserts nothing.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { type ProxyTracerProvider, trace } from "@opentelemetry/api";
import { createLogger } from "../src/observability/logger.js";
import {
  activeTraceparent,
  inSpan,
  linksTo,
  SpanKind,
  startSpan,
  storedParent,
  traceparentOf,
  withSpan,
} from "../src/observability/tracing.js";
import { startTracing } from "../src/observability/tracing-sdk.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const OPS = Number(process.env.BENCH_OPS ?? 2000);
const BATCH = 20;
const STORED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/** The body each unit wraps: one await, as the real code awaits its database call. */
const body = () => Promise.resolve();

type Unit = { name: string; bare: () => Promise<unknown>; traced: () => Promise<unknown> };

const UNITS: Unit[] = [
  {
    // src/inbound/routes.ts: the request span, the inbox write span and the context stored with it.
    name: "receiver request",
    bare: async () => {
      await body();
    },
    traced: () =>
      inSpan(
        "bitrix_sync.webhook.receive",
        () => ({
          root: true,
          kind: SpanKind.SERVER,
          attributes: {
            "http.request.method": "POST",
            "http.route": "/bitrix/sync/webhook/contact",
            "bitrix_sync.webhook.receiver": "contact",
          },
        }),
        async (span) => {
          await inSpan(
            "bitrix_sync.inbox.write",
            { attributes: { "bitrix_sync.webhook.receiver": "contact" } },
            async (w) => {
              const traceContext = traceparentOf(w);
              await body();
              w.setAttribute("bitrix_sync.inbox.group_size", traceContext ? 2 : 1);
              w.setAttribute("bitrix_sync.inbox.id", "12345");
            },
          );
          span.setAttribute("http.response.status_code", 200);
        },
      ),
  },
  {
    // src/workflows/step-lane.ts + step/core.ts: the step span under the stored intake context.
    name: "workflow step",
    bare: async () => {
      await body();
    },
    traced: () =>
      inSpan(
        "bitrix_sync.workflow.step",
        {
          parent: storedParent(STORED),
          attributes: {
            "bitrix_sync.workflow.id": "7b40524b-6976-40fe-bc29-7040027729c4",
            "bitrix_sync.workflow.type": "contact.map_or_create",
            "bitrix_sync.workflow.intent": "contact.map_or_create",
            "bitrix_sync.workflow.step": "start",
            "bitrix_sync.workflow.attempt": 1,
            "bitrix_sync.correlation.id": "66d34b80-be59-475d-9c6e-bf8b76c4858c",
          },
        },
        async (span) => {
          const issued = activeTraceparent();
          await body();
          span.setAttribute("bitrix_sync.workflow.event", issued ? "await_crm" : "succeed");
          span.setAttribute("bitrix_sync.command.type", "contact.find_by_phone");
        },
      ),
  },
  {
    // src/workflows/pump.ts + crm/batch.ts + crm/traced-client.ts: 20 command spans, the batch span
    // linked to them, its HTTP span, and each settle under its command's span.
    name: `batch of ${BATCH} sends`,
    bare: async () => {
      await body();
      for (let i = 0; i < BATCH; i++) await body();
    },
    traced: async () => {
      const spans = Array.from({ length: BATCH }, (_, i) =>
        startSpan("bitrix_sync.crm.command", () => ({
          parent: storedParent(STORED),
          attributes: {
            "bitrix_sync.command.id": String(1000 + i),
            "bitrix_sync.command.type": "contact.add",
            "bitrix_sync.command.attempt": 1,
            "bitrix_sync.batch.id": "ff3bd0be-34a6-4c44-a25a-c6d1cbc5bafe",
          },
        })),
      );
      await inSpan(
        "bitrix_sync.crm.batch",
        () => ({
          attributes: { "bitrix_sync.batch.size": BATCH, "bitrix_sync.batch.command_types": "contact.add" },
          links: linksTo(spans),
        }),
        async (batch) => {
          await inSpan(
            "bitrix_sync.crm.http",
            { kind: SpanKind.CLIENT, attributes: { "http.request.method": "POST", "server.address": "p" } },
            async (http) => {
              await body();
              http.setAttribute("http.response.status_code", 200);
            },
          );
          batch.setAttributes({ "bitrix_sync.batch.ok": BATCH, "bitrix_sync.batch.failed": 0 });
        },
      );
      for (const span of spans) {
        span.setAttribute("bitrix_sync.outcome", "ok");
        await withSpan(span, body);
        span.end();
      }
    },
  },
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

/**
 * Per op, in ns: the wall time the unit itself takes (what a request or a step waits), and this
 * process's CPU time including exporting every span made (the flush after the loop).
 */
async function timeOps(
  fn: () => Promise<unknown>,
  flush?: () => Promise<void>,
): Promise<{ wall: number; cpu: number }> {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < OPS; i++) await fn();
  const wall = Number(process.hrtime.bigint() - t0) / OPS;
  if (flush) await flush();
  const c = process.cpuUsage(c0);
  return { wall, cpu: ((c.user + c.system) * 1000) / OPS };
}

/** A child process: one mode, every unit; prints {unit: nsPerOp} as JSON. */
async function measure(mode: string, endpoint?: string): Promise<void> {
  let flush: (() => Promise<void>) | undefined;
  if (mode.startsWith("sdk")) {
    const log = createLogger({ level: "warn", destination: process.stderr });
    await startTracing({ endpoint, serviceVersion: "bench", environment: "bench", log });
    const provider = (trace.getTracerProvider() as ProxyTracerProvider).getDelegate() as unknown as {
      forceFlush(): Promise<void>;
    };
    // A refused export rejects the flush; the service never waits on one (the exporter's own
    // timer drives its exports), so here it only ends the measurement.
    flush = () => provider.forceFlush().catch(() => undefined);
  }
  const out: Record<string, { wall: number; cpu: number }> = {};
  for (const u of UNITS) {
    const fn = mode === "none" ? u.bare : u.traced;
    await timeOps(fn, flush); // warm-up
    const rounds: Array<{ wall: number; cpu: number }> = [];
    for (let r = 0; r < ROUNDS; r++) rounds.push(await timeOps(fn, flush));
    out[u.name] = { wall: median(rounds.map((r) => r.wall)), cpu: median(rounds.map((r) => r.cpu)) };
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
  process.exit(0);
}

function run(args: string[], env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString("utf8");
    });
    child.on("exit", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${args.join(" ")} exited ${code}`)),
    );
  });
}

/** A collector on loopback that reads and acknowledges every export. */
async function sink(): Promise<{ url: string; bytes: () => number; close(): Promise<void> }> {
  let bytes = 0;
  const server = createServer((req, res) => {
    req.on("data", (c: Buffer) => {
      bytes += c.length;
    });
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bytes: () => bytes,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A loopback port nothing listens on: the collector is down. */
async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

async function main(): Promise<void> {
  const self = fileURLToPath(import.meta.url);
  const collector = await sink();
  const down = await closedPort();
  console.log(`tracing bench: ${OPS} ops x ${ROUNDS} rounds per unit (median), one process per mode`);
  const modes: Array<[string, string, string | undefined]> = [
    ["none", "no tracing calls", undefined],
    ["noop", "tracing off (the default)", undefined],
    ["sdk", "SDK exporting to loopback", collector.url],
    ["sdk-down", "SDK, collector refusing", down],
  ];
  type Result = Record<string, { wall: number; cpu: number }>;
  const results: Record<string, Result> = {};
  for (const [mode, , endpoint] of modes) {
    const args = [self, "--measure", mode, ...(endpoint ? ["--endpoint", endpoint] : [])];
    results[mode] = JSON.parse((await run(args)).trim()) as Result;
  }
  const pad = (s: string, n: number) => s.padEnd(n);
  const cell = (v: { wall: number; cpu: number } | undefined) =>
    v ? `${v.wall.toFixed(0)} / ${v.cpu.toFixed(0)}` : "?";
  console.log(`  ${pad("ns per unit: wall / CPU", 34)}${UNITS.map((u) => pad(u.name, 24)).join("")}`);
  for (const [mode, label] of modes) {
    const r = results[mode] ?? {};
    console.log(`  ${pad(label, 34)}${UNITS.map((u) => pad(cell(r[u.name]), 24)).join("")}`);
  }
  const none = results.none ?? {};
  const noop = results.noop ?? {};
  console.log(
    `  tracing off vs no calls (wall): ${UNITS.map((u) => `${u.name} ${((noop[u.name]?.wall ?? 0) - (none[u.name]?.wall ?? 0)).toFixed(0)} ns`).join(", ")}`,
  );
  console.log(`  exported to the loopback collector: ${(collector.bytes() / 1024).toFixed(0)} KiB`);

  const requests = Number(process.env.BENCH_REQUESTS ?? 20_000);
  if (requests > 0) {
    const receiver = fileURLToPath(new URL("./receiver.ts", import.meta.url));
    for (const [label, env] of [
      ["receiver, tracing off", {}],
      ["receiver, SDK exporting to loopback", { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url }],
    ] as const) {
      const out = await run([receiver], { BENCH_REQUESTS: String(requests), ...env });
      const pick = (re: RegExp) => re.exec(out)?.[1] ?? "?";
      console.log(
        `  ${pad(label, 38)} inserts/s ${pick(/durable inserts\/s: (\d+)/)}, ` +
          `p50 ${pick(/p50 ([\d.]+)/)} ms, p99 ${pick(/p99 ([\d.]+)/)} ms, ${pick(/(rows == 2xx|MISMATCH)/)}`,
      );
    }
  }
  await collector.close();
}

const at = process.argv.indexOf("--measure");
if (at >= 0) {
  const e = process.argv.indexOf("--endpoint");
  await measure(process.argv[at + 1] as string, e >= 0 ? process.argv[e + 1] : undefined);
} else {
  await main();
}
