// `npm run bench:receiver`: durable webhook inserts per second and p99 latency of the Contact
// receiver on loopback (issue 6; goal ≥ 3 000/s and p99 < 20 ms on 2 cores).
//
// The server runs in a child process (this file with --serve), exactly as the service builds it
// (createApp on the service's receiver and status pools, src/db/pools.ts, and its HTTP server,
// src/http/server.ts), against a freshly migrated database on
// TEST_DATABASE_URL's server or, without it, on an embedded PostgreSQL. autocannon drives it from
// this process with valid robot requests for a rotating set of Contacts. Afterwards the number of
// inbox rows must equal the number of 200 replies.
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set the server exports its spans there (npm run bench:tracing).
// Knobs: BENCH_REQUESTS (default 60000), BENCH_CONNECTIONS (32), BENCH_POOL (receiver pool, 3), BENCH_IN_FLIGHT
// (grouped inbox calls in flight, default 2), BENCH_PROFILE_DIR
// (write a V8 CPU profile of the server there).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import pg from "pg";
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUERY_BYTES } from "../src/config/receivers.js";
import { startEmbedded } from "../src/db/embedded.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { createPool } from "../src/db/pools.js";
import { withDatabase } from "../src/db/url.js";
import { createApp } from "../src/http/app.js";
import { createHttpServer } from "../src/http/server.js";
import { createLogger } from "../src/observability/logger.js";
import { startTracing } from "../src/observability/tracing-sdk.js";

const TOKEN = randomBytes(32).toString("hex");
const HOST = "bench-portal.bitrix24.test";
const MEMBER = randomBytes(16).toString("hex");

async function serveMode(): Promise<void> {
  const url = process.env.BENCH_DB_URL as string;
  const pool = createPool(url, "status");
  const receiverPool = createPool(url, "receiver", { max: Number(process.env.BENCH_POOL ?? 3) });
  const log = createLogger({ level: "warn", destination: process.stderr });
  // npm run bench:tracing runs this server once more with the SDK exporting (issue 12).
  const tracing = await startTracing({
    endpoint: process.env.OTEL_EXPORTER_OTLP_ENDPOINT,
    serviceVersion: "bench",
    environment: "bench",
    log,
  });
  const app = createApp({
    pool,
    receiverPool,
    log,
    receiver: {
      tokens: { contact: { current: process.env.BENCH_TOKEN }, alert: {} },
      portalHost: HOST,
      memberId: process.env.BENCH_MEMBER,
      maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
      maxQueryBytes: DEFAULT_MAX_QUERY_BYTES,
      inbox: process.env.BENCH_IN_FLIGHT ? { maxInFlight: Number(process.env.BENCH_IN_FLIGHT) } : undefined,
    },
  });
  const server = createHttpServer(app);
  server.listen(0, "127.0.0.1", () => {
    process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
  });
  process.on("SIGTERM", () => {
    server.close();
    void Promise.all([pool.end(), receiverPool.end()])
      .then(() => tracing?.shutdown(2_000))
      .then(() => process.exit(0));
  });
}

function robotBody(id: number): string {
  const enc = encodeURIComponent;
  return [
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${id}`],
    ["auth[domain]", HOST],
    ["auth[client_endpoint]", `https://${HOST}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", MEMBER],
  ]
    .map(([k, v]) => `${enc(k as string)}=${enc(v as string)}`)
    .join("&");
}

async function mainMode(): Promise<number> {
  const amount = Number(process.env.BENCH_REQUESTS ?? 60_000);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
  const poolSize = Number(process.env.BENCH_POOL ?? 3);
  // Other processes on the machine shift the figures; the 1-minute load average says how much.
  const loadBefore = (loadavg()[0] ?? 0).toFixed(1);

  let serverUrl = process.env.TEST_DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  let dir: string | undefined;
  if (!serverUrl) {
    dir = mkdtempSync(join(tmpdir(), "bitrix-sync-bench-"));
    const srv = await startEmbedded({ dir, persistent: false });
    serverUrl = srv.url;
    stopEmbedded = srv.stop;
  }
  const dbName = `bs_bench_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withDatabase(serverUrl, "postgres") });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const dbUrl = withDatabase(serverUrl, dbName);
  const count = new pg.Client({ connectionString: dbUrl });
  let child: ReturnType<typeof spawn> | undefined;
  try {
    await migrateDatabase(dbUrl);
    await count.connect();
    const settings = await count.query<{ s: string; f: string }>(
      "select current_setting('synchronous_commit') as s, current_setting('fsync') as f",
    );

    const profile = process.env.BENCH_PROFILE_DIR
      ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE_DIR]
      : [];
    child = spawn(
      process.execPath,
      [...profile, "--import", "tsx", fileURLToPath(import.meta.url), "--serve"],
      {
        env: { ...process.env, BENCH_DB_URL: dbUrl, BENCH_TOKEN: TOKEN, BENCH_MEMBER: MEMBER },
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    const port = await new Promise<number>((resolve, reject) => {
      const rl = createInterface({ input: child?.stdout as NodeJS.ReadableStream });
      rl.once("line", (line) => resolve((JSON.parse(line) as { port: number }).port));
      child?.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
    });

    const base = `http://127.0.0.1:${port}`;
    const requests = Array.from({ length: 64 }, (_, i) => ({
      method: "POST",
      path: `/bitrix/sync/webhook/contact?token=${TOKEN}&ID=${1000 + i}`,
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: robotBody(1000 + i),
    }));
    // Warm-up: JIT, prepared statements, pool connections.
    await autocannon({ url: base, connections, amount: 3000, requests });
    const before = (await count.query<{ n: string }>("select count(*) as n from bitrix_sync.webhook_inbox"))
      .rows[0]?.n;
    const r = await autocannon({ url: base, connections, amount, requests });
    const after = (await count.query<{ n: string }>("select count(*) as n from bitrix_sync.webhook_inbox"))
      .rows[0]?.n;
    const rows = Number(after) - Number(before);

    const perSec = rows / r.duration;
    const consistent = rows === r["2xx"] && r.non2xx === 0 && r.errors === 0;
    console.log(
      `receiver bench: ${amount} requests, ${connections} connections, pool ${poolSize}, ` +
        `${process.env.BENCH_IN_FLIGHT ?? 2} inbox calls in flight, ${cpus().length} CPUs, load before ${loadBefore}, ` +
        `synchronous_commit=${settings.rows[0]?.s}, fsync=${settings.rows[0]?.f}`,
    );
    console.log(`  durable inserts/s: ${perSec.toFixed(0)} (goal >= 3000)`);
    console.log(
      `  latency ms: p50 ${r.latency.p50}, p90 ${r.latency.p90}, p99 ${r.latency.p99} (goal < 20), max ${r.latency.max}`,
    );
    console.log(
      `  2xx ${r["2xx"]}, non-2xx ${r.non2xx}, errors ${r.errors}, timeouts ${r.timeouts}; inbox rows ${rows}: ${consistent ? "rows == 2xx" : "MISMATCH"}`,
    );
    const goal = perSec >= 3000 && r.latency.p99 < 20;
    console.log(`  goal ${goal ? "met" : "MISSED"}`);
    return consistent ? 0 : 1;
  } finally {
    child?.kill("SIGTERM");
    if (child && child.exitCode === null) await new Promise((resolve) => child?.once("exit", resolve));
    await count.end().catch(() => undefined);
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
    await stopEmbedded?.();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv.includes("--serve")) await serveMode();
else process.exitCode = await mainMode();
