// A Bitrix24 portal on loopback, faithful to ../shared/reference/bitrix24-rest.md: the webhook URL
// form with its secret checked, JSON/form/query bodies, success and error envelopes with `time`,
// `batch` (halt, result/result_error/result_total/result_next/result_time, empty maps as [], and
// `$result[...]` references resolved in every value: ./batch-refs.ts), the
// leaky bucket (503 QUERY_LIMIT_EXCEEDED), per-method operating time (429 OPERATION_TIME_LIMIT, and
// a per-command error inside a batch), and faults scripted per test. Every request is logged so
// tests can assert batch sizes and request rates. Used by the tests and by sandbox mode.
//
// Inside a batch, every sub-request's decoded keys and values go through the portal core's
// reference resolution (./batch-refs.ts) before the method runs: `$result[key][..]` and its
// siblings are replaced by earlier replies, exactly as a real portal does, so a client that lets
// free text into a batch sees here the damage it would do there. A direct call resolves nothing.
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { parsePhpQuery } from "../../src/crm/php-query.js";
import { newBatchResults, recordReply, resolveParams } from "./batch-refs.js";
import { LeakyBucket, OperatingMeter, type OperatingOptions } from "./limits.js";
import { formatPortalTime, METHODS, type MethodReply, scopeRefusal } from "./methods.js";
import {
  type EnumElement,
  type PortalContract,
  PortalStore,
  type SmartProcessDef,
  type UserFieldType,
  type WorkflowTemplate,
} from "./store.js";

/** A fault to inject into the next matching request (or command). */
export type Fault =
  /** Wait this long before handling the request. */
  | { kind: "latency"; ms: number }
  /** Refuse the whole HTTP request with this envelope, before executing anything. */
  | { kind: "http_error"; status: number; error: string; description: string }
  /** Execute, then answer 200 with a body that is not JSON. */
  | { kind: "malformed" }
  /** Execute (the write is committed), then send nothing; the socket closes after `holdMs`. */
  | { kind: "timeout_after_commit"; holdMs?: number }
  /** Close the connection without executing or answering. */
  | { kind: "reset_before_execute" }
  /** Execute nothing and send nothing (a portal that hangs); the socket closes after `holdMs`. */
  | { kind: "timeout_before_execute"; holdMs?: number }
  /** Make the next call of the method (direct or inside a batch) fail with this error. */
  | { kind: "command_error"; error: string; description: string; status?: number };

/** Shorthands for the faults tests use most. */
export type FaultShorthand =
  | "QUERY_LIMIT_EXCEEDED"
  | "OPERATION_TIME_LIMIT"
  | "INTERNAL_SERVER_ERROR"
  | "malformed"
  | "timeout_after_commit"
  | "timeout_before_execute"
  | "reset_before_execute";

/** One line of the request log. */
export interface RequestLogEntry {
  /** When the request arrived / was answered (epoch ms). */
  at: number;
  finishedAt: number;
  /** REST method of the HTTP request (`batch` for a batch). */
  method: string;
  /** HTTP status sent; 0 when no answer was sent (timeout/reset faults). */
  status: number;
  /** Number of sub-requests of a batch; null for a direct call. */
  batchSize: number | null;
  /** REST methods executed (sub-requests of a batch, or the one direct method). */
  commands: string[];
  fault?: Fault["kind"];
}

export interface EmulatorOptions {
  /** Listen port; 0 (default) picks a free one. Always loopback. */
  port?: number;
  host?: string;
  /** Webhook user id and secret; the secret defaults to a random string. */
  user?: number;
  secret?: string;
  /** Physical names of the integration's Contact user fields. */
  fields: { userId: string; registered: string; citizenship: string };
  smartProcesses?: SmartProcessDef[];
  /** Leaky bucket: drain per second and threshold. Default 2 and 50 (non-Enterprise plans). */
  rate?: { drainPerSec: number; threshold: number };
  /** Operating-time limit; cost is the seconds one call of a method adds. */
  operating?: Partial<OperatingOptions> & { costSec?: number | Record<string, number> };
  /** Latency added to every request. */
  latencyMs?: number;
  utcOffsetMinutes?: number;
  /**
   * The portal's clock for its limits and record times (default Date.now). Tests pass a controlled
   * clock to make the leaky bucket and operating windows deterministic.
   */
  now?: () => number;
  /** IDs of the first new Contact and item (see StoreOptions.firstIds). */
  firstIds?: { contact?: number; item?: number };
  /** A portal set up wrongly: an integration field of another type, or missing (null). */
  userFieldTypes?: Partial<Record<"userId" | "registered" | "citizenship", UserFieldType>>;
  /** The citizenship list's elements; [] is a list without items. */
  citizenship?: EnumElement[];
  /** Scopes the webhook was given; default ["crm"]. Other methods answer insufficient_scope. */
  scopes?: string[];
  /** The forms the portal honours where the reference leaves them open (default: as documented). */
  contract?: PortalContract;
  /** Business process templates for bizproc.workflow.template.list; default none. */
  workflowTemplates?: WorkflowTemplate[];
  /** Whether the webhook's user is an administrator (bizproc.workflow.template.list); default true. */
  bizprocAdmin?: boolean;
}

/** A running emulator. */
export interface Emulator {
  /** Webhook URL, with trailing slash: http://127.0.0.1:<port>/rest/<user>/<secret>/ */
  readonly url: string;
  /** host:port, what BITRIX_SYNC_PORTAL_HOST must be set to. */
  readonly host: string;
  readonly port: number;
  readonly secret: string;
  readonly store: PortalStore;
  readonly log: RequestLogEntry[];
  readonly bucket: LeakyBucket;
  readonly operating: OperatingMeter;
  /**
   * Queues a fault for the next matching request. `method` filters: the REST method of the request,
   * or of any command inside a batch (the whole batch then gets the fault); for command_error, the
   * command's method. `skip` lets that many matches through first (e.g. fail the second page only).
   * `params` (command_error only): the command's parameters must hold these values too, compared as
   * strings (e.g. `{ start: 50 }` fails the page at offset 50, however often it is sent).
   */
  failNext(
    fault: Fault | FaultShorthand,
    opts?: { method?: string; times?: number; skip?: number; params?: Record<string, string | number> },
  ): void;
  /** Drops every queued fault (the end of a storm or an outage scripted with `times`). */
  clearFaults(): void;
  /** Latency for every request from now on. */
  setLatency(ms: number): void;
  /**
   * An outage: every request gets this fault (never a command_error) until called with null; queued
   * faults wait meanwhile. Faults of an outage are logged like queued ones.
   */
  setOutage(fault: Fault | FaultShorthand | null): void;
  /** The webhook is deleted in the portal: every call answers 401. */
  revokeCredential(): void;
  restoreCredential(): void;
  close(): Promise<void>;
}

interface QueuedFault {
  fault: Fault;
  method?: string;
  /** command_error: parameter values the command must hold (compared as strings). */
  params?: Record<string, string | number>;
  times: number;
  /** Matching requests (or commands) to let through before the fault applies. */
  skip: number;
}

const MAX_BATCH = 50;
const MAX_BODY = 8 * 1024 * 1024;

function expand(f: Fault | FaultShorthand): Fault {
  switch (f) {
    case "QUERY_LIMIT_EXCEEDED":
      return {
        kind: "http_error",
        status: 503,
        error: "QUERY_LIMIT_EXCEEDED",
        description: "Too many requests",
      };
    case "OPERATION_TIME_LIMIT":
      return {
        kind: "http_error",
        status: 429,
        error: "OPERATION_TIME_LIMIT",
        description: "Method is blocked due to operation time limit.",
      };
    case "INTERNAL_SERVER_ERROR":
      return {
        kind: "http_error",
        status: 500,
        error: "INTERNAL_SERVER_ERROR",
        description: "Internal server error",
      };
    case "malformed":
      return { kind: "malformed" };
    case "timeout_after_commit":
      return { kind: "timeout_after_commit" };
    case "reset_before_execute":
      return { kind: "reset_before_execute" };
    case "timeout_before_execute":
      return { kind: "timeout_before_execute" };
    default:
      return f;
  }
}

/** PHP's json_encode of an array: [] when empty, a list when keyed 0..n-1, else an object. */
export function phpMap(m: Record<string, unknown>): unknown {
  const keys = Object.keys(m);
  if (keys.length === 0) return [];
  if (keys.every((k, i) => k === String(i))) return keys.map((k) => m[k]);
  return m;
}

function truthy(v: unknown): boolean {
  return v === true || v === 1 || v === "1" || v === "Y" || v === "true";
}

/** Starts the emulator on loopback. */
export async function startEmulator(opts: EmulatorOptions): Promise<Emulator> {
  const user = opts.user ?? 1;
  const secret = opts.secret ?? randomBytes(12).toString("hex");
  const offset = opts.utcOffsetMinutes ?? 180;
  const clock = opts.now ?? Date.now;
  const store = new PortalStore({
    fields: opts.fields,
    utcOffsetMinutes: offset,
    now: clock,
    ...(opts.smartProcesses ? { smartProcesses: opts.smartProcesses } : {}),
    firstIds: opts.firstIds,
    ...(opts.userFieldTypes ? { userFieldTypes: opts.userFieldTypes } : {}),
    ...(opts.citizenship ? { citizenship: opts.citizenship } : {}),
    ...(opts.scopes ? { scopes: opts.scopes } : {}),
    ...(opts.contract ? { contract: opts.contract } : {}),
    ...(opts.workflowTemplates ? { workflowTemplates: opts.workflowTemplates } : {}),
    ...(opts.bizprocAdmin !== undefined ? { bizprocAdmin: opts.bizprocAdmin } : {}),
  });
  const bucket = new LeakyBucket(opts.rate?.drainPerSec ?? 2, opts.rate?.threshold ?? 50, clock);
  const operating = new OperatingMeter(
    {
      limitSec: opts.operating?.limitSec ?? 480,
      windowMs: opts.operating?.windowMs ?? 600_000,
      bucketMs: opts.operating?.bucketMs ?? 60_000,
    },
    clock,
  );
  const cost = opts.operating?.costSec ?? 0.01;
  const costOf = (method: string) => (typeof cost === "number" ? cost : (cost[method] ?? 0.01));
  const log: RequestLogEntry[] = [];
  const faults: QueuedFault[] = [];
  const sockets = new Set<Socket>();
  let latencyMs = opts.latencyMs ?? 0;
  let revoked = false;
  let outage: Fault | null = null;

  function takeFault(pred: (q: QueuedFault) => boolean): Fault | undefined {
    const idx = faults.findIndex(pred);
    if (idx < 0) return undefined;
    const q = faults[idx] as QueuedFault;
    if (q.skip > 0) {
      q.skip--;
      return undefined;
    }
    q.times--;
    if (q.times <= 0) faults.splice(idx, 1);
    return q.fault;
  }

  function timeBlock(start: number, op?: { operating: number; operatingResetAt: number }) {
    const finish = Date.now();
    const t: Record<string, unknown> = {
      start: start / 1000,
      finish: finish / 1000,
      duration: (finish - start) / 1000,
      processing: (finish - start) / 1000,
      date_start: formatPortalTime(start, offset),
      date_finish: formatPortalTime(finish, offset),
    };
    if (op) {
      t.operating_reset_at = op.operatingResetAt;
      t.operating = op.operating;
    }
    return t;
  }

  /** Runs one REST method with command faults and operating-time accounting. */
  function runMethod(
    method: string,
    params: Record<string, unknown>,
  ): { reply: MethodReply; op?: { operating: number; operatingResetAt: number }; started: number } {
    const started = Date.now();
    const handler = METHODS[method];
    if (!handler) {
      return {
        reply: { ok: false, status: 404, error: "ERROR_METHOD_NOT_FOUND", description: "Method not found!" },
        started,
      };
    }
    const forced = takeFault(
      (q) =>
        q.fault.kind === "command_error" &&
        (q.method === undefined || q.method === method) &&
        Object.entries(q.params ?? {}).every(([k, v]) => String(params[k]) === String(v)),
    );
    if (forced && forced.kind === "command_error") {
      return {
        reply: {
          ok: false,
          status: forced.status ?? 400,
          error: forced.error,
          description: forced.description,
        },
        started,
      };
    }
    const refused = scopeRefusal(store, method);
    if (refused) return { reply: refused, started };
    if (operating.blocked(method)) {
      return {
        reply: {
          ok: false,
          status: 429,
          error: "OPERATION_TIME_LIMIT",
          description: "Method is blocked due to operation time limit.",
        },
        started,
      };
    }
    const reply = handler(params, store);
    const op = operating.charge(method, costOf(method));
    return { reply, op, started };
  }

  function runBatch(params: Record<string, unknown>, commands: string[]): { status: number; body: unknown } {
    const started = Date.now();
    const cmdRaw = params.cmd;
    const cmd: Record<string, unknown> = Array.isArray(cmdRaw)
      ? Object.fromEntries(cmdRaw.map((v, i) => [String(i), v]))
      : cmdRaw !== null && typeof cmdRaw === "object"
        ? (cmdRaw as Record<string, unknown>)
        : {};
    const keys = Object.keys(cmd);
    if (keys.length > MAX_BATCH) {
      return {
        status: 400,
        body: { error: "ERROR_BATCH_LENGTH_EXCEEDED", error_description: "Max batch length exceeded" },
      };
    }
    const halt = truthy(params.halt);
    const result: Record<string, unknown> = {};
    const resultError: Record<string, unknown> = {};
    const resultTotal: Record<string, unknown> = {};
    const resultNext: Record<string, unknown> = {};
    const resultTime: Record<string, unknown> = {};
    // What the core's references see: every reply so far, as methodsBatch collects them.
    const refs = newBatchResults();
    for (const key of keys) {
      const line = typeof cmd[key] === "string" ? (cmd[key] as string) : "";
      const q = line.indexOf("?");
      const method = (q < 0 ? line : line.slice(0, q)).replace(/\.json$/, "");
      commands.push(method);
      let reply: MethodReply;
      let op: { operating: number; operatingResetAt: number } | undefined;
      let subStart = Date.now();
      if (method === "batch") {
        reply = {
          ok: false,
          status: 405,
          error: "ERROR_BATCH_METHOD_NOT_ALLOWED",
          description: "Method is not allowed for batch usage",
        };
      } else {
        // parse_str decodes the query string first, then every key and value is resolved against
        // the replies of the commands before it (batch-refs.ts): percent-encoding protects nothing.
        const decoded = parsePhpQuery(q < 0 ? "" : line.slice(q + 1));
        const r = runMethod(method, resolveParams(decoded, refs) as Record<string, unknown>);
        reply = r.reply;
        op = r.op;
        subStart = r.started;
      }
      if (reply.ok) {
        result[key] = reply.result;
        const res: Record<string, unknown> = { result: reply.result };
        if (reply.total !== undefined) resultTotal[key] = res.total = reply.total;
        if (reply.next !== undefined) resultNext[key] = res.next = reply.next;
        resultTime[key] = res.time = timeBlock(subStart, op);
        recordReply(refs, key, res);
      } else {
        resultError[key] = { error: reply.error, error_description: reply.description };
        recordReply(refs, key, { error: reply.error, error_description: reply.description });
        if (halt) break;
      }
    }
    return {
      status: 200,
      body: {
        result: {
          result: phpMap(result),
          result_error: phpMap(resultError),
          result_total: phpMap(resultTotal),
          result_next: phpMap(resultNext),
          result_time: phpMap(resultTime),
        },
        time: timeBlock(started),
      },
    };
  }

  async function readBody(req: IncomingMessage): Promise<string | null> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > MAX_BODY) return null;
      chunks.push(c);
    }
    return Buffer.concat(chunks).toString("utf8");
  }

  /** REST methods named by a batch's cmd lines, so a request fault can target "the batch carrying X". */
  function batchMethods(params: Record<string, unknown>): string[] {
    const cmd = params.cmd;
    if (cmd === null || typeof cmd !== "object") return [];
    return Object.values(cmd as Record<string, unknown>).map((line) => {
      const l = String(line);
      const q = l.indexOf("?");
      return (q < 0 ? l : l.slice(0, q)).replace(/\.json$/, "");
    });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const at = Date.now();
    const url = new URL(req.url ?? "/", "http://emulator.invalid");
    const m = /^\/rest\/(\d+)\/([^/]+)\/([^/]+)$/.exec(url.pathname);
    const method = (m?.[3] ?? url.pathname.split("/").pop() ?? "").replace(/\.json$/, "");
    const entry: RequestLogEntry = { at, finishedAt: at, method, status: 0, batchSize: null, commands: [] };
    log.push(entry);
    const send = (status: number, body: unknown) => {
      entry.status = status;
      entry.finishedAt = Date.now();
      const text = JSON.stringify(body);
      res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
      res.end(text);
    };
    const raw = await readBody(req);
    if (raw === null)
      return send(413, { error: "INVALID_REQUEST", error_description: "Request is too large" });

    if (!m || Number(m[1]) !== user || m[2] !== secret || revoked) {
      return send(
        401,
        m
          ? { error: "INVALID_CREDENTIALS", error_description: "Invalid request credentials" }
          : { error: "NO_AUTH_FOUND", error_description: "Wrong authorization data" },
      );
    }
    if (!bucket.tryAdd()) {
      return send(503, { error: "QUERY_LIMIT_EXCEEDED", error_description: "Too many requests" });
    }
    let params: Record<string, unknown> = parsePhpQuery(url.search.slice(1));
    const type = String(req.headers["content-type"] ?? "").toLowerCase();
    if (raw.trim() !== "") {
      if (type.includes("application/json")) {
        try {
          const parsed = JSON.parse(raw) as unknown;
          if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
            params = { ...params, ...(parsed as Record<string, unknown>) };
          }
        } catch {
          return send(400, { error: "INVALID_REQUEST", error_description: "Invalid JSON" });
        }
      } else {
        params = { ...params, ...parsePhpQuery(raw) };
      }
    }

    const fault =
      outage ??
      takeFault(
        (q) =>
          q.fault.kind !== "command_error" &&
          (q.method === undefined ||
            q.method === method ||
            (method === "batch" && batchMethods(params).includes(q.method))),
      );
    if (fault) entry.fault = fault.kind;
    const delay = latencyMs + (fault?.kind === "latency" ? fault.ms : 0);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    if (fault?.kind === "reset_before_execute") {
      entry.finishedAt = Date.now();
      req.socket.destroy();
      return;
    }
    if (fault?.kind === "http_error") {
      return send(fault.status, { error: fault.error, error_description: fault.description });
    }
    if (fault?.kind === "timeout_before_execute") {
      // Nothing is executed and nothing is answered; the client's deadline fires first.
      const hold = setTimeout(() => req.socket.destroy(), fault.holdMs ?? 60_000);
      hold.unref();
      req.socket.once("close", () => clearTimeout(hold));
      entry.finishedAt = Date.now();
      return;
    }

    let status: number;
    let body: unknown;
    if (method === "batch") {
      const cmd = params.cmd;
      entry.batchSize = cmd !== null && typeof cmd === "object" ? Object.keys(cmd).length : 0;
      ({ status, body } = runBatch(params, entry.commands));
    } else {
      entry.commands.push(method);
      const r = runMethod(method, params);
      if (r.reply.ok) {
        status = 200;
        const b: Record<string, unknown> = { result: r.reply.result };
        if (r.reply.total !== undefined) b.total = r.reply.total;
        if (r.reply.next !== undefined) b.next = r.reply.next;
        b.time = timeBlock(r.started, r.op);
        body = b;
      } else {
        status = r.reply.status;
        body = { error: r.reply.error, error_description: r.reply.description };
      }
    }

    if (fault?.kind === "timeout_after_commit") {
      // The work is done and committed; the answer never comes. The client's deadline fires first.
      const hold = setTimeout(() => req.socket.destroy(), fault.holdMs ?? 60_000);
      hold.unref();
      req.socket.once("close", () => clearTimeout(hold));
      entry.finishedAt = Date.now();
      return;
    }
    if (fault?.kind === "malformed") {
      entry.status = 200;
      entry.finishedAt = Date.now();
      res.writeHead(200, { "content-type": "application/json; charset=utf-8" });
      res.end('{"result":{"result":{"c1":');
      return;
    }
    send(status, body);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(
          JSON.stringify({ error: "INTERNAL_SERVER_ERROR", error_description: "Internal server error" }),
        );
      }
    });
  });
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  const host = opts.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  const hostPort = `${host}:${port}`;

  return {
    url: `http://${hostPort}/rest/${user}/${secret}/`,
    host: hostPort,
    port,
    secret,
    store,
    log,
    bucket,
    operating,
    failNext(f, o = {}) {
      faults.push({
        fault: expand(f),
        ...(o.method !== undefined ? { method: o.method } : {}),
        ...(o.params !== undefined ? { params: o.params } : {}),
        times: o.times ?? 1,
        skip: o.skip ?? 0,
      });
    },
    clearFaults() {
      faults.length = 0;
    },
    setLatency(ms) {
      latencyMs = ms;
    },
    setOutage(f) {
      const e = f === null ? null : expand(f);
      if (e?.kind === "command_error") throw new TypeError("an outage refuses whole requests");
      outage = e;
    },
    revokeCredential() {
      revoked = true;
    },
    restoreCredential() {
      revoked = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
