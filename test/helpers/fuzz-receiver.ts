// The receivers' fuzz run over real HTTP (`npm run fuzz:receiver`; a short run is part of `npm test`,
// test/integration/inbound/fuzz-network.test.ts). The real service (src/main.ts) runs as a child
// process against a fresh test database and the Bitrix24 emulator, receivers only
// (BITRIX_SYNC_ENABLED=false: nothing processes the inbox, so every row stays to be counted). It
// gets the generated mix of test/helpers/receiver-requests.ts, each request with its own entity ID,
// sent over keep-alive connections, or over a raw socket of its own when the transport is the point:
// bodies dribbled in pieces, bodies far over the limit, broken framing, bodies that stall.
// Afterwards the inbox is compared with the answers.
import { connect } from "node:net";
import fc from "fast-check";
import { Pool } from "undici";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { startEmulator } from "../../tools/emulator/server.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import { TEST_ALERT_TOKEN, TEST_CONTACT_TOKEN, TEST_MEMBER_ID, waitFor } from "./e2e.js";
import { type Contract, type Req, robotRequest, serialise } from "./receiver-requests.js";
import { serviceEnv, startService } from "./service-process.js";
import { setSettings } from "./settings.js";
import { createTestDb } from "./testdb.js";

export const FUZZ_CONTACT_TOKEN_PREVIOUS = "fuzz-contact-previous-3b5d7f9a1c2e4f6a8b";
export const FUZZ_ALERT_TOKEN_PREVIOUS = "fuzz-alert-previous-6e8a0c2d4f1b3d5f7a9c";
const ALERT_ENTITY_TYPE_ID = 1038;
/** Replaced by each request's own entity ID, so every row names the request that made it. */
const PLACEHOLDER = "918273645546372819";

export interface FuzzOptions {
  requests: number;
  seed?: number;
  /** Keep-alive connections for ordinary requests. */
  connections?: number;
  /** Raw sockets at once for the transport cases. */
  rawSockets?: number;
  /** Requests whose body stalls until the service's request timeout ends them (each ~10 s). */
  stalled?: number;
  progress?: (line: string) => void;
}

export interface FuzzReport {
  seed: number;
  requests: number;
  valid: number;
  byTransport: Record<string, number>;
  statuses: Record<string, number>;
  /** What the stalled requests ended with: 408 or a closed connection, or a refusal that did not need the body. */
  stalledOutcomes: Record<string, number>;
  /** Until the last answer of a request that was not stalled on purpose. */
  seconds: number;
  rate: number;
  /** Goals, each 0. */
  rowsForMalformed: number;
  fiveXx: number;
  validLost: number;
  validRefused: number;
  duplicateRows: number;
}

export const GOALS = ["rowsForMalformed", "fiveXx", "validLost", "validRefused", "duplicateRows"] as const;

export function missedGoals(r: FuzzReport): string[] {
  return GOALS.filter((g) => r[g] !== 0);
}

type Transport = "keepalive" | "slow" | "huge" | "framing" | "stalled";

interface Sent {
  receiver: string;
  id: string;
  valid: boolean;
  transport: Transport;
  /** The HTTP status, or "closed" when the connection ended without one. */
  outcome: number | "closed";
}

/** A small deterministic PRNG (mulberry32): the same seed picks the same transports. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One request on a socket of its own; resolves with the status line's code, or "closed". */
function rawExchange(
  port: number,
  head: string,
  chunks: Buffer[],
  gapMs: number,
  stallAfter = false,
): Promise<number | "closed"> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    let reply = "";
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(guard);
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(reply);
      resolve(m ? Number(m[1]) : "closed");
      socket.destroy();
    };
    // Longer than any of the service's own limits: reaching it is a finding, reported as "closed".
    const guard = setTimeout(finish, 30_000);
    socket.on("data", (d) => {
      reply += d.toString("latin1");
      if (/^HTTP\/1\.[01] \d{3}/.test(reply) && reply.includes("\r\n\r\n")) finish();
    });
    socket.on("error", finish);
    socket.on("close", finish);
    socket.on("connect", async () => {
      try {
        socket.write(head);
        for (const c of chunks) {
          if (done || socket.destroyed) return;
          if (gapMs > 0) await sleep(gapMs);
          socket.write(c);
        }
        if (stallAfter) return; // wait for the service to give up on us
      } catch {
        finish();
      }
    });
  });
}

function headFor(
  s: ReturnType<typeof serialise>,
  framing: { length?: number; chunked?: boolean; extra?: string[] },
): string {
  const lines = [`${s.method} ${s.path} HTTP/1.1`, "Host: 127.0.0.1", "Connection: close"];
  if (s.contentType !== undefined) lines.push(`Content-Type: ${s.contentType}`);
  if (framing.length !== undefined) lines.push(`Content-Length: ${framing.length}`);
  if (framing.chunked) lines.push("Transfer-Encoding: chunked");
  lines.push(...(framing.extra ?? []));
  return `${lines.join("\r\n")}\r\n\r\n`;
}

function chunked(body: Buffer, pieces: number): Buffer[] {
  const out: Buffer[] = [];
  const size = Math.max(1, Math.ceil(body.length / pieces));
  for (let at = 0; at < body.length; at += size) {
    const part = body.subarray(at, at + size);
    out.push(Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from("\r\n")]));
  }
  out.push(Buffer.from("0\r\n\r\n"));
  return out;
}

function split(body: Buffer, pieces: number): Buffer[] {
  const size = Math.max(1, Math.ceil(body.length / pieces));
  const out: Buffer[] = [];
  for (let at = 0; at < body.length; at += size) out.push(body.subarray(at, at + size));
  return out;
}

/** Runs the fuzz against a service it starts; always stops what it started. */
export async function runReceiverFuzz(opts: FuzzOptions): Promise<FuzzReport> {
  const seed = opts.seed ?? Math.floor(Math.random() * 2 ** 31);
  const say = opts.progress ?? (() => undefined);
  const db = await createTestDb();
  const emulator = await startEmulator({ fields: SANDBOX_FIELDS });
  let service: ReturnType<typeof startService> | undefined;
  let http: Pool | undefined;
  try {
    await setSettings(db, { ...DEFAULT_ALERT_SETTINGS, "alerts.entity_type_id": ALERT_ENTITY_TYPE_ID });
    const env = serviceEnv(
      db.url,
      { url: emulator.url, host: emulator.host },
      { BITRIX_SYNC_ENABLED: "false" },
      {
        BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS: FUZZ_CONTACT_TOKEN_PREVIOUS,
        BITRIX_SYNC_ALERT_RECEIVER_TOKEN_PREVIOUS: FUZZ_ALERT_TOKEN_PREVIOUS,
      },
    );
    service = startService(env);
    const svc = service;
    const port = await waitFor(
      async () => {
        const m = /"event":"http\.listening","port":(\d+)/.exec(svc.output.join(""));
        return m ? Number(m[1]) : null;
      },
      30_000,
      "the service to listen",
    );
    say(`service listening on 127.0.0.1:${port} (pid ${svc.child.pid}); seed ${seed}`);
    const contract: Contract = {
      tokens: {
        contact: TEST_CONTACT_TOKEN,
        contactPrevious: FUZZ_CONTACT_TOKEN_PREVIOUS,
        alert: TEST_ALERT_TOKEN,
        alertPrevious: FUZZ_ALERT_TOKEN_PREVIOUS,
      },
      portalHost: emulator.host,
      memberId: TEST_MEMBER_ID,
      alertEntityTypeId: ALERT_ENTITY_TYPE_ID,
    };
    const arbitrary = robotRequest(contract, fc.constant(PLACEHOLDER));
    const random = prng(seed);
    const connections = opts.connections ?? 16;
    http = new Pool(`http://127.0.0.1:${port}`, { connections, pipelining: 1, keepAliveTimeout: 5_000 });
    const pool = http;
    const rawLimit = opts.rawSockets ?? 8;
    let rawInFlight = 0;
    const sent: Sent[] = [];
    const stalledWanted = opts.stalled ?? 0;
    let stalledStarted = 0;

    const sendOne = async (r: Req, index: number): Promise<void> => {
      const id = `5${String(index).padStart(17, "0")}`;
      const s = serialise(r);
      s.path = s.path.replaceAll(PLACEHOLDER, id);
      const body =
        s.body === undefined
          ? undefined
          : Buffer.from(Buffer.from(s.body).toString("latin1").replaceAll(PLACEHOLDER, id), "latin1");
      const pick = random();
      let transport: Transport = "keepalive";
      if (
        stalledStarted < stalledWanted &&
        index % Math.max(1, Math.floor(opts.requests / stalledWanted)) === 7
      ) {
        transport = "stalled";
        stalledStarted++;
      } else if (pick < 0.04 && body !== undefined) transport = "slow";
      else if (pick < 0.06) transport = "huge";
      else if (pick < 0.07 && body !== undefined) transport = "framing";
      const valid = r.valid && (transport === "keepalive" || transport === "slow");
      let outcome: number | "closed";
      if (transport === "keepalive") {
        const headers: Record<string, string> = {};
        if (s.contentType !== undefined) headers["content-type"] = s.contentType;
        try {
          const res = await pool.request({
            path: s.path,
            method: s.method as "POST",
            headers,
            ...(body !== undefined ? { body } : {}),
          });
          await res.body.dump();
          outcome = res.statusCode;
        } catch {
          outcome = "closed";
        }
      } else {
        while (rawInFlight >= rawLimit) await sleep(5);
        rawInFlight++;
        try {
          const b = body ?? Buffer.alloc(0);
          if (transport === "slow") {
            const pieces = 2 + Math.floor(random() * 4);
            outcome = await rawExchange(
              port,
              headFor(s, { length: b.length }),
              split(b, pieces),
              20 + Math.floor(random() * 100),
            );
          } else if (transport === "huge") {
            const size = 16 * 1024 + Math.floor(random() * 1024 * 1024);
            const huge = Buffer.concat([b, Buffer.from("&auth%5Bpad%5D="), Buffer.alloc(size, 0x78)]);
            outcome =
              random() < 0.5
                ? await rawExchange(port, headFor(s, { length: huge.length }), split(huge, 8), 0)
                : await rawExchange(port, headFor(s, { chunked: true }), chunked(huge, 8), 0);
          } else if (transport === "framing") {
            const kind = Math.floor(random() * 3);
            outcome =
              kind === 0
                ? // A chunk size that is not hexadecimal.
                  await rawExchange(port, headFor(s, { chunked: true }), [Buffer.from("zz\r\n"), b], 0)
                : kind === 1
                  ? // Both a length and chunked: request smuggling territory, refused by the parser.
                    await rawExchange(port, headFor(s, { length: b.length, chunked: true }), chunked(b, 2), 0)
                  : // Two different lengths.
                    await rawExchange(
                      port,
                      headFor(s, { length: b.length, extra: [`Content-Length: ${b.length + 1}`] }),
                      [b],
                      0,
                    );
          } else {
            // Stalled: half the body, then nothing until the service's request timeout.
            outcome = await rawExchange(
              port,
              headFor(s, { length: b.length + 10 }),
              [b.subarray(0, Math.floor(b.length / 2))],
              0,
              true,
            );
          }
        } finally {
          rawInFlight--;
        }
      }
      sent.push({ receiver: r.receiver, id, valid, transport, outcome });
      if (transport !== "stalled") lastAnswerAt = Date.now();
    };

    const started = Date.now();
    let lastAnswerAt = started;
    const inFlight = new Set<Promise<void>>();
    const limit = connections * 2 + rawLimit;
    const BATCH = 1_000;
    let lastReport = started;
    for (let b = 0; b * BATCH < opts.requests; b++) {
      const n = Math.min(BATCH, opts.requests - b * BATCH);
      const batch = fc.sample(arbitrary, { numRuns: n, seed: seed + b });
      for (let i = 0; i < batch.length; i++) {
        const p: Promise<void> = sendOne(batch[i] as Req, b * BATCH + i).finally(() => inFlight.delete(p));
        inFlight.add(p);
        if (inFlight.size >= limit) await Promise.race(inFlight);
      }
      if (Date.now() - lastReport > 5_000) {
        lastReport = Date.now();
        say(
          `${sent.length} answered, ${((sent.length * 1000) / (Date.now() - started)).toFixed(0)} requests/s`,
        );
      }
    }
    await Promise.all(inFlight);
    // The stalled requests end at the service's request timeout whatever the load: not in the rate.
    const seconds = Math.max(lastAnswerAt - started, 1) / 1000;

    const { rows } = await db.pool.query<{ receiver: string; entity_id: string; n: number }>(
      "select receiver, entity_id, count(*)::int as n from bitrix_sync.webhook_inbox group by 1, 2",
    );
    const rowsOf = new Map(rows.map((r) => [`${r.receiver}:${r.entity_id}`, r.n]));
    const validKeys = new Set(sent.filter((x) => x.valid).map((x) => `${x.receiver}:${x.id}`));
    const report: FuzzReport = {
      seed,
      requests: sent.length,
      valid: validKeys.size,
      byTransport: {},
      statuses: {},
      stalledOutcomes: {},
      seconds,
      rate: sent.length / seconds,
      rowsForMalformed: 0,
      fiveXx: 0,
      validLost: 0,
      validRefused: 0,
      duplicateRows: 0,
    };
    for (const x of sent) {
      report.byTransport[x.transport] = (report.byTransport[x.transport] ?? 0) + 1;
      report.statuses[String(x.outcome)] = (report.statuses[String(x.outcome)] ?? 0) + 1;
      if (x.transport === "stalled") {
        report.stalledOutcomes[String(x.outcome)] = (report.stalledOutcomes[String(x.outcome)] ?? 0) + 1;
      }
      if (typeof x.outcome === "number" && x.outcome >= 500) report.fiveXx++;
      if (!x.valid) continue;
      const n = rowsOf.get(`${x.receiver}:${x.id}`) ?? 0;
      if (x.outcome === 200 && n === 0) report.validLost++;
      if (x.outcome !== 200) report.validRefused++;
      if (n > 1) report.duplicateRows += n - 1;
    }
    for (const [key, n] of rowsOf) if (!validKeys.has(key)) report.rowsForMalformed += n;
    return report;
  } finally {
    await http?.close().catch(() => undefined);
    if (service) {
      service.child.kill("SIGTERM");
      await Promise.race([service.exited, sleep(15_000)]);
      if (service.child.exitCode === null) service.child.kill("SIGKILL");
    }
    await emulator.close().catch(() => undefined);
    await db.drop();
  }
}

export function formatReport(r: FuzzReport): string {
  const goal = (name: string, v: number) =>
    `  ${name.padEnd(44)} ${String(v).padStart(8)}   (goal 0)${v === 0 ? "" : "  MISSED"}`;
  return [
    `receiver fuzz: ${r.requests} requests (${r.valid} valid) in ${r.seconds.toFixed(1)} s, ${r.rate.toFixed(0)} requests/s, seed ${r.seed}`,
    `  transports: ${JSON.stringify(r.byTransport)}`,
    `  answers:    ${JSON.stringify(r.statuses)}`,
    goal("rows written for malformed input", r.rowsForMalformed),
    goal("5xx answers", r.fiveXx),
    goal("valid requests lost (answered 200, no row)", r.validLost),
    goal("valid requests refused or unanswered", r.validRefused),
    goal("duplicate rows for a valid request", r.duplicateRows),
  ].join("\n");
}
