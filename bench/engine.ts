// npm run bench:engine — how much the engine costs per CRM command, and whether it fills batches at
// the portal's ceiling. Both modes run the whole App->CRM path (intake, workflow steps, the pump,
// the emulator over loopback HTTP) on an embedded PostgreSQL with pg_stat_statements.
//   unlimited: an emulator without a rate limit (5 ms latency), the limiter at its maxima (50
//     requests/s, burst 250, 50 in flight), batch.size 50; a backlog of new users. Prints CRM
//     commands/s (goal >= 2 000) and database time per command (goal <= 0.5 ms), with the top
//     statements.
//   ceiling: the portal's real limit (2 requests/s, 100 ms latency), batch.size 50. Prints commands/s
//     while a backlog exists (goal >= 0.95 x 100) and mean commands per request (goal: full batches).
// Env: BENCH_USERS (default 3000), BENCH_MODE (unlimited | ceiling | both, default both),
// BENCH_HISTORY (users already linked before the run, default 0: an empty installation),
// BENCH_SETUP_SQL (SQL applied after the migrations: a variant), BENCH_TOP (statements listed),
// BENCH_TOP_WIDTH (characters of each statement's text printed, default 110),
// BENCH_DATABASE_URL (an existing server instead of the embedded one).
import {
  type BenchRig,
  countCommands,
  insertUsers,
  machineLine,
  pgServerCpuMs,
  printTop,
  printTopFunctions,
  readDb,
  resetDbReading,
  seedHistory,
  startBenchRig,
  stopBenchServer,
  waitSucceeded,
} from "./engine-rig.js";

const USERS = Number(process.env.BENCH_USERS ?? 3000);
const MODE = process.env.BENCH_MODE ?? "both";
/** Users already linked before the run (seedHistory): a running installation rather than an empty one. */
const HISTORY = Number(process.env.BENCH_HISTORY ?? 0);

async function backlogRun(rig: BenchRig): Promise<{ seconds: number; commands: number; cpuMs: number }> {
  if (HISTORY > 0) {
    await seedHistory(rig, HISTORY);
    console.log(
      `  history: ${HISTORY} users already linked (succeeded workflows, commands, mappings), analysed`,
    );
  }
  await insertUsers(rig, USERS);
  const commandsBefore = await countCommands(rig);
  const base = await resetDbReading(rig);
  const pgCpu = await pgServerCpuMs(rig);
  const cpu = process.cpuUsage();
  const started = Date.now();
  await rig.startWorker();
  await waitSucceeded(rig, HISTORY + USERS, 30 * 60_000, 25);
  const seconds = (Date.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const pgCpuAfter = await pgServerCpuMs(rig);
  const commands = (await countCommands(rig)) - commandsBefore;
  const reading = await readDb(rig, base);
  console.log(
    `  ${USERS} users settled in ${seconds.toFixed(2)} s: ${commands} CRM commands, ${(commands / seconds).toFixed(0)} commands/s`,
  );
  console.log(
    `  database time ${(reading.totalMs / 1000).toFixed(2)} s (${reading.source}): ${(reading.totalMs / commands).toFixed(3)} ms per command; ` +
      `service process CPU ${((used.user + used.system) / 1000 / commands).toFixed(3)} ms per command`,
  );
  if (pgCpu !== null && pgCpuAfter !== null) {
    console.log(
      `  PostgreSQL server CPU ${((pgCpuAfter - pgCpu) / 1000).toFixed(2)} s (/proc): ${((pgCpuAfter - pgCpu) / commands).toFixed(3)} ms per command; ` +
        `${reading.calls === undefined ? "?" : (reading.calls / commands).toFixed(1)} statements per command`,
    );
  }
  printTop(reading, Number(process.env.BENCH_TOP_WIDTH ?? 110));
  await printTopFunctions(rig);
  return { seconds, commands, cpuMs: reading.totalMs };
}

async function unlimited(): Promise<void> {
  const rig = await startBenchRig({
    emulator: {
      latencyMs: 5,
      rate: { drainPerSec: 1e9, threshold: 1e9 },
      operating: { limitSec: 1e9 },
    },
    settings: {
      "batch.size": 50,
      "batch.max_wait_ms": 50,
      "limiter.refill_per_sec": 50,
      "limiter.burst": 250,
      "limiter.max_in_flight": 50,
      "claim.size": 50,
      "lease.ttl_sec": 60,
      "worker.poll_interval_ms": 1000,
    },
  });
  try {
    console.log(`bench:engine unlimited — emulator without a rate limit, 5 ms latency; ${machineLine()}`);
    const r = await backlogRun(rig);
    const requests = rig.emulator.log.filter((l) => l.method === "batch");
    const sent = requests.reduce((s, l) => s + (l.batchSize ?? 0), 0);
    console.log(
      `  ${requests.length} batch requests, ${(sent / Math.max(1, requests.length)).toFixed(1)} commands per request`,
    );
    const perCommand = r.cpuMs / r.commands;
    console.log(
      `  goals: commands/s ${(r.commands / r.seconds).toFixed(0)} (>= 2000: ${r.commands / r.seconds >= 2000 ? "met" : "NOT met"}), ` +
        `DB ms/command ${perCommand.toFixed(3)} (<= 0.5: ${perCommand <= 0.5 ? "met" : "NOT met"}); ${machineLine()}`,
    );
  } finally {
    await rig.stopAll();
  }
}

async function ceiling(): Promise<void> {
  const BATCH = 50;
  const RATE = 2;
  const BURST = 5;
  const rig = await startBenchRig({
    emulator: { latencyMs: 100, rate: { drainPerSec: RATE, threshold: 50 } },
    settings: {
      "batch.size": BATCH,
      "batch.max_wait_ms": 200,
      "limiter.refill_per_sec": RATE,
      "limiter.burst": BURST,
      "limiter.max_in_flight": 2,
      "lease.ttl_sec": 60,
      "worker.poll_interval_ms": 2000,
    },
  });
  try {
    console.log(
      `bench:engine ceiling — ${RATE} requests/s, batch.size ${BATCH}, 100 ms latency; ${machineLine()}`,
    );
    const r = await backlogRun(rig);
    const requests = rig.emulator.log.filter((l) => l.method === "batch").sort((a, b) => a.at - b.at);
    const refused = rig.emulator.log.filter((l) => l.status === 503).length;
    // A backlog exists until fewer than two full batches are left to send.
    let cumulative = 0;
    let end = requests.length;
    for (const [i, l] of requests.entries()) {
      if (r.commands - cumulative < 2 * BATCH) {
        end = i;
        break;
      }
      cumulative += l.batchSize ?? 0;
    }
    const window = requests.slice(0, end);
    const steady = window.slice(BURST);
    const span = ((steady.at(-1)?.at ?? 0) - (steady[0]?.at ?? 0)) / 1000;
    const steadyCmds = steady.slice(0, -1).reduce((s, l) => s + (l.batchSize ?? 0), 0);
    const rate = span > 0 ? steadyCmds / span : 0;
    const mean = window.reduce((s, l) => s + (l.batchSize ?? 0), 0) / Math.max(1, window.length);
    const full = window.filter((l) => l.batchSize === BATCH).length;
    console.log(
      `  while a backlog existed: ${window.length} requests, mean ${mean.toFixed(2)} commands per request (${full} full), ` +
        `${rate.toFixed(1)} commands/s after the burst; 503 refusals: ${refused}`,
    );
    console.log(
      `  goal: ratio to ${RATE} x ${BATCH} = ${RATE * BATCH}/s: ${(rate / (RATE * BATCH)).toFixed(3)} (>= 0.95: ${rate / (RATE * BATCH) >= 0.95 ? "met" : "NOT met"}); ${machineLine()}`,
    );
  } finally {
    await rig.stopAll();
  }
}

try {
  if (MODE === "unlimited" || MODE === "both") await unlimited();
  if (MODE === "ceiling" || MODE === "both") await ceiling();
} finally {
  await stopBenchServer();
}
