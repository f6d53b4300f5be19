// `npm run bench:crm`: a backlog of CRM commands (default 2 000) sent the way the sync loop's pump
// lanes send them: each lane takes a permit from the PostgreSQL limiter, then up to a batch of
// commands, then one executeBatch; as many lanes as the limiter lets requests in flight. Into the
// emulator at the portal's real limits (2 requests/s refill, burst 5, 100 ms latency per request).
// Prints CRM operations per second, mean commands per HTTP request, and operations per second ÷
// (rate × batch size); the goal is ≥ 0.95. The backlog is all due at once, so the pump's wait for a
// partial batch to fill (batch.max_wait_ms) never applies.
//
//   BENCH_COMMANDS=500 npm run bench:crm       a shorter run
//   BENCH_DATABASE_URL / TEST_DATABASE_URL      server to create a scratch database on; else embedded
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { type CommandOutcome, type CrmDeps, executeBatch } from "../src/crm/batch.js";
import type { CrmCommand } from "../src/crm/catalogue.js";
import { createCrmClient } from "../src/crm/client.js";
import { createPgLimiter } from "../src/crm/limiter.js";
import { startEmbedded } from "../src/db/embedded.js";
import { migrateDatabase } from "../src/db/migrate.js";
import { withDatabase } from "../src/db/url.js";
import { startEmulator } from "../tools/emulator/server.js";

const COMMANDS = Number(process.env.BENCH_COMMANDS ?? 2000);
const RATE = 2;
const BURST = 5;
const BATCH = 20;
const IN_FLIGHT = 2;
const LATENCY_MS = 100;

async function scratchDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  let server = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  let dir: string | undefined;
  if (!server) {
    dir = mkdtempSync(join(tmpdir(), "bitrix-sync-bench-"));
    const srv = await startEmbedded({ dir, persistent: false });
    server = srv.url;
    stopEmbedded = srv.stop;
  }
  const name = `bs_bench_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: withDatabase(server, "postgres") });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = withDatabase(server, name);
  await migrateDatabase(url);
  return {
    url,
    async drop() {
      const a = new pg.Client({ connectionString: withDatabase(server as string, "postgres") });
      await a.connect();
      await a.query(`drop database if exists ${name} with (force)`);
      await a.end();
      if (stopEmbedded) await stopEmbedded();
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

function backlog(n: number, contactIds: number[]): CrmCommand[] {
  const out: CrmCommand[] = [];
  for (let i = 0; i < n; i++) {
    const phone = `+7999${String(i).padStart(7, "0")}`;
    const uid = `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;
    switch (i % 4) {
      case 0:
      case 1:
        out.push({ type: "contact.find_by_phone", params: { phones: [phone] } });
        break;
      case 2:
        out.push({ type: "contact.add", params: { phone, userId: uid, registered: true } });
        break;
      default:
        out.push({
          type: "contact.update",
          params: { id: contactIds[i % contactIds.length] as number, registered: i % 8 === 3 },
        });
    }
  }
  return out;
}

/**
 * The pump's order (src/workflows/pump.ts runPump): the permit first, so the batch keeps filling
 * while it waits for a token, then up to BATCH commands, then one batch under that permit.
 */
async function pump(deps: CrmDeps, commands: CrmCommand[]): Promise<CommandOutcome[]> {
  const outcomes: CommandOutcome[] = [];
  let next = 0;
  const lane = async () => {
    while (next < commands.length) {
      const permit = await deps.limiter.acquire();
      const from = next;
      const take = commands.slice(from, from + BATCH);
      next += take.length;
      if (take.length === 0) {
        await permit.release();
        break;
      }
      const outs = await executeBatch(deps, take, { permit });
      outs.forEach((o, i) => {
        outcomes[from + i] = o;
      });
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
  return outcomes;
}

async function main(): Promise<void> {
  const db = await scratchDatabase();
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  const emu = await startEmulator({
    fields: SANDBOX_FIELDS,
    rate: { drainPerSec: 2, threshold: 50 },
    latencyMs: LATENCY_MS,
  });
  const contactIds = Array.from({ length: 100 }, (_, i) => emu.store.createContact({ name: `seed ${i}` }).id);
  const client = createCrmClient({ webhookUrl: emu.url, portalHost: emu.host, timeoutMs: 10_000 });
  const limiter = createPgLimiter({
    pool,
    bucket: emu.host,
    holder: `bench:${process.pid}`,
    settings: { refillPerSec: RATE, burst: BURST, maxInFlight: IN_FLIGHT },
    slotTtlMs: 15_000,
  });
  const deps: CrmDeps = { client, limiter, catalogue: { fields: SANDBOX_FIELDS } };
  try {
    const commands = backlog(COMMANDS, contactIds);
    console.log(
      `bench:crm  ${COMMANDS} commands, limiter ${RATE} req/s burst ${BURST} in-flight ${IN_FLIGHT}, batch ${BATCH}, latency ${LATENCY_MS} ms`,
    );
    const started = performance.now();
    const outcomes = await pump(deps, commands);
    const elapsedSec = (performance.now() - started) / 1000;

    const ok = outcomes.filter((o) => o.ok).length;
    const failed = outcomes.length - ok;
    const batches = emu.log.filter((l) => l.method === "batch");
    const refused = emu.log.filter((l) => l.status === 503).length;
    const commandsSent = batches.reduce((s, l) => s + (l.batchSize ?? 0), 0);
    const opsPerSec = ok / elapsedSec;
    const ratio = opsPerSec / (RATE * BATCH);
    // The burst lets the first requests go at once; the steady state is what a long backlog sees.
    const steady = batches.slice(BURST);
    const steadySpan = ((steady.at(-1)?.at ?? 0) - (steady[0]?.at ?? 0)) / 1000;
    const steadyOps = steady.slice(1).reduce((s, l) => s + (l.batchSize ?? 0), 0) / steadySpan;
    console.log(`elapsed                         ${elapsedSec.toFixed(1)} s`);
    console.log(`commands ok / failed            ${ok} / ${failed}`);
    console.log(`HTTP requests (batch)           ${batches.length}  (503 refusals: ${refused})`);
    console.log(`CRM operations/s                ${opsPerSec.toFixed(2)}`);
    console.log(`mean commands per HTTP request  ${(commandsSent / Math.max(1, batches.length)).toFixed(2)}`);
    console.log(`ops/s ÷ (rate × batch size)     ${ratio.toFixed(3)}  (goal ≥ 0.95)`);
    console.log(
      `steady state, after the burst   ${steadyOps.toFixed(2)} ops/s, ratio ${(steadyOps / (RATE * BATCH)).toFixed(3)}`,
    );
    if (failed > 0 || refused > 0) process.exitCode = 1;
  } finally {
    await client.close();
    await emu.close();
    await pool.end();
    await db.drop();
  }
}

await main();
