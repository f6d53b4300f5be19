// npm run bench:peers — the engine beside graphile-worker, the job queue it runs on, in one run, on
// one PostgreSQL server (embedded, pg_stat_statements preloaded) and one machine:
//   graphile-worker: BENCH_PEER_JOBS trivial jobs (a task that returns at once) added with
//     graphile_worker.add_jobs() in statements of 1 000, then run and completed by a worker; once with
//     its defaults (concurrency 4, as the service runs it) and once with its documented batching
//     (localQueue, completeJobBatchDelay, more concurrency). Jobs/s for run+complete, and the server's
//     CPU per job for add+run+complete (a job: an insert, a lock and a delete).
//   the engine: bench:engine's unlimited run (BENCH_USERS new users, two CRM commands each, an
//     emulator without a rate limit): CRM commands/s and the server's CPU per command (a command's
//     rows pass through about six versions by the §7 state machines, besides its workflow's steps).
// Goals (issue 36): commands/s >= 1.0 x the faster graphile-worker jobs/s; server CPU per command
// <= 1.0 x its CPU per job. Prints both against each configuration, the round trips (top-level
// statements, each one request and its answer) per command and per job, and the top statements of
// each.
// Env: BENCH_PEER_JOBS (default 20 000), BENCH_USERS (default 3 000), BENCH_TOP, BENCH_TOP_WIDTH,
// BENCH_DATABASE_URL (an existing server instead of the embedded one; no server CPU then).
import { Logger, makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";
import { createEmptyDb } from "../test/helpers/testdb.js";
import {
  type BenchRig,
  backlogRun,
  benchServer,
  machineLine,
  pgServerCpuMs,
  printTop,
  readDb,
  resetDbReading,
  startUnlimitedRig,
  stopBenchServer,
} from "./engine-rig.js";

const JOBS = Number(process.env.BENCH_PEER_JOBS ?? 20_000);
const USERS = Number(process.env.BENCH_USERS ?? 3000);
const WIDTH = Number(process.env.BENCH_TOP_WIDTH ?? 110);
const quietLogger = new Logger(() => () => undefined);

interface PeerConfig {
  name: string;
  concurrency: number;
  localQueueSize?: number;
  completeJobBatchDelay?: number;
}

const PEER_CONFIGS: PeerConfig[] = [
  { name: "defaults, concurrency 4", concurrency: 4 },
  {
    name: "batched: localQueue 500, completeJobBatchDelay 0, concurrency 16",
    concurrency: 16,
    localQueueSize: 500,
    completeJobBatchDelay: 0,
  },
];

interface PeerResult {
  config: PeerConfig;
  addSeconds: number;
  runSeconds: number;
  jobsPerSec: number;
  /** Server CPU (ms) of the add and of the run, or null without /proc access. */
  addCpuMs: number | null;
  runCpuMs: number | null;
  /** Top-level statements (round trips) per job, add+run+complete. */
  statementsPerJob: number | null;
}

async function graphileWorker(config: PeerConfig): Promise<PeerResult> {
  const db = await createEmptyDb();
  const pool = new pg.Pool({ connectionString: db.url, max: config.concurrency + 4 });
  pool.on("error", () => undefined);
  pool.on("connect", (c) => c.on("error", () => undefined));
  const utils = await makeWorkerUtils({ pgPool: pool });
  try {
    await utils.migrate();
    await pool.query("create extension if not exists pg_stat_statements");
    // The readings of engine-rig read the database of `rig.db.pool`.
    const rig = { db: { pool }, statements: true } as unknown as BenchRig;
    const base = await resetDbReading(rig);
    const cpu0 = await pgServerCpuMs(rig);
    let t = Date.now();
    for (let done = 0; done < JOBS; done += 1000) {
      await pool.query(
        `select graphile_worker.add_jobs(array(
           select json_populate_record(null::graphile_worker.job_spec,
                    json_build_object('identifier', 'noop', 'payload', json_build_object('n', g)))
             from generate_series($1::int, $2::int) g))`,
        [done + 1, Math.min(JOBS, done + 1000)],
      );
    }
    const addSeconds = (Date.now() - t) / 1000;
    const cpu1 = await pgServerCpuMs(rig);
    t = Date.now();
    const runner = await run({
      pgPool: pool,
      concurrency: config.concurrency,
      noHandleSignals: true,
      pollInterval: 1000,
      taskList: { noop: async () => undefined },
      // No cron items: without this graphile-worker reads ./crontab (the service's), and a run that
      // crosses a minute schedules jobs no task here takes, so the queue never empties.
      parsedCronItems: [],
      logger: quietLogger,
      ...(config.localQueueSize !== undefined || config.completeJobBatchDelay !== undefined
        ? {
            preset: {
              worker: {
                ...(config.localQueueSize !== undefined
                  ? { localQueue: { size: config.localQueueSize } }
                  : {}),
                ...(config.completeJobBatchDelay !== undefined
                  ? { completeJobBatchDelay: config.completeJobBatchDelay }
                  : {}),
              },
            },
          }
        : {}),
    });
    for (;;) {
      const { rows } = await pool.query<{ n: number }>(
        "select /* bench */ count(*)::int as n from graphile_worker._private_jobs",
      );
      if ((rows[0]?.n ?? 1) === 0) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    const runSeconds = (Date.now() - t) / 1000;
    await runner.stop();
    const cpu2 = await pgServerCpuMs(rig);
    const reading = await readDb(rig, base);
    const result: PeerResult = {
      config,
      addSeconds,
      runSeconds,
      jobsPerSec: JOBS / runSeconds,
      addCpuMs: cpu0 !== null && cpu1 !== null ? cpu1 - cpu0 : null,
      runCpuMs: cpu1 !== null && cpu2 !== null ? cpu2 - cpu1 : null,
      statementsPerJob: reading.calls === undefined ? null : reading.calls / JOBS,
    };
    console.log(`graphile-worker (${config.name}): ${JOBS} trivial jobs; ${machineLine()}`);
    console.log(
      `  add ${addSeconds.toFixed(2)} s (${(JOBS / addSeconds).toFixed(0)} jobs/s), run+complete ${runSeconds.toFixed(2)} s: ${result.jobsPerSec.toFixed(0)} jobs/s`,
    );
    if (result.addCpuMs !== null && result.runCpuMs !== null) {
      console.log(
        `  PostgreSQL server CPU per job: add ${(result.addCpuMs / JOBS).toFixed(3)} ms + run+complete ${(result.runCpuMs / JOBS).toFixed(3)} ms = ${((result.addCpuMs + result.runCpuMs) / JOBS).toFixed(3)} ms`,
      );
    }
    console.log(
      `  database time ${(reading.totalMs / JOBS).toFixed(3)} ms per job, ${reading.calls === undefined ? "?" : (reading.calls / JOBS).toFixed(2)} statements per job`,
    );
    printTop(reading, WIDTH);
    return result;
  } finally {
    await utils.release();
    await pool.end();
    await db.drop();
  }
}

try {
  await benchServer();
  const peers: PeerResult[] = [];
  for (const c of PEER_CONFIGS) peers.push(await graphileWorker(c));
  const rig = await startUnlimitedRig();
  let engine: Awaited<ReturnType<typeof backlogRun>>;
  try {
    console.log(`the engine (bench:engine unlimited): ${USERS} new users; ${machineLine()}`);
    engine = await backlogRun(rig, { users: USERS });
  } finally {
    await rig.stopAll();
  }
  const best = peers.reduce((a, b) => (b.jobsPerSec > a.jobsPerSec ? b : a));
  const commandsPerSec = engine.commands / engine.seconds;
  const engineCpu = engine.serverCpuMs !== null ? engine.serverCpuMs / engine.commands : null;
  const engineStatements = engine.reading.calls === undefined ? null : engine.reading.calls / engine.commands;
  const peerCpuOf = (p: PeerResult) =>
    p.addCpuMs !== null && p.runCpuMs !== null ? (p.addCpuMs + p.runCpuMs) / JOBS : null;
  console.log("bench:peers — side by side");
  for (const p of peers) {
    const cpu = peerCpuOf(p);
    console.log(
      `  graphile-worker (${p.config.name}): ${p.jobsPerSec.toFixed(0)} jobs/s, ` +
        `server CPU ${cpu === null ? "?" : cpu.toFixed(3)} ms per job, ` +
        `${p.statementsPerJob === null ? "?" : p.statementsPerJob.toFixed(2)} round trips per job; ` +
        `the engine per it: throughput ${(commandsPerSec / p.jobsPerSec).toFixed(2)}, ` +
        `CPU ${cpu !== null && engineCpu !== null ? (engineCpu / cpu).toFixed(2) : "?"}`,
    );
  }
  console.log(
    `  the engine: ${commandsPerSec.toFixed(0)} CRM commands/s, server CPU ${engineCpu === null ? "?" : engineCpu.toFixed(3)} ms per command, ` +
      `${engineStatements === null ? "?" : engineStatements.toFixed(2)} round trips (top-level statements) per command`,
  );
  const ratio = commandsPerSec / best.jobsPerSec;
  console.log(
    `  goal: commands per graphile-worker job (${best.config.name}) ${ratio.toFixed(2)} (>= 1.0: ${ratio >= 1 ? "met" : "NOT met"})`,
  );
  const peerCpu = peerCpuOf(best);
  if (peerCpu !== null && engineCpu !== null) {
    const cpuRatio = engineCpu / peerCpu;
    console.log(
      `  goal: server CPU per command ${engineCpu.toFixed(3)} ms / per job ${peerCpu.toFixed(3)} ms = ${cpuRatio.toFixed(2)} (<= 1.0: ${cpuRatio <= 1 ? "met" : "NOT met"}); ${machineLine()}`,
    );
  } else {
    console.log("  server CPU not readable (not a server on this machine): the CPU goal is not measured");
  }
} finally {
  await stopBenchServer();
}
