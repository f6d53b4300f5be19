// npm run bench:storm — the portal refuses every request with 503 QUERY_LIMIT_EXCEEDED for 60 s
// (another application emptied the budget) while 1 000 new users wait, then answers normally again
// at its real limit (2 requests/s, leaky bucket of 50). Prints the drain time against the ideal
// (storm + commands ÷ 100/s; goal <= 1.05 x) and the requests refused after the storm (goal: none).
// Env: BENCH_USERS (default 1000), BENCH_STORM_SEC (default 60), BENCH_DATABASE_URL.
import {
  countCommands,
  insertUsers,
  machineLine,
  startBenchRig,
  stopBenchServer,
  waitSucceeded,
} from "./engine-rig.js";

const USERS = Number(process.env.BENCH_USERS ?? 1000);
const STORM_SEC = Number(process.env.BENCH_STORM_SEC ?? 60);
const RATE = 2;
const BATCH = 50;

const rig = await startBenchRig({
  emulator: { latencyMs: 100, rate: { drainPerSec: RATE, threshold: 50 } },
  settings: {
    "batch.size": BATCH,
    "batch.max_wait_ms": 200,
    "limiter.refill_per_sec": RATE,
    "limiter.burst": 5,
    "limiter.max_in_flight": 2,
    "lease.ttl_sec": 60,
    "retry.base_ms": 1000,
    "retry.max_ms": 300000,
    "worker.poll_interval_ms": 2000,
  },
});
try {
  console.log(
    `bench:storm — ${STORM_SEC} s of QUERY_LIMIT_EXCEEDED over the whole portal, ${USERS} users waiting; ${machineLine()}`,
  );
  await insertUsers(rig, USERS);
  rig.emulator.failNext("QUERY_LIMIT_EXCEEDED", { times: Number.MAX_SAFE_INTEGER });
  const t0 = Date.now();
  await rig.startWorker();
  await new Promise((r) => setTimeout(r, STORM_SEC * 1000));
  rig.emulator.clearFaults();
  const stormEnd = Date.now();
  await waitSucceeded(rig, USERS, 30 * 60_000, 100);
  const done = Date.now();
  const commands = await countCommands(rig);
  const drain = (done - t0) / 1000;
  const ideal = STORM_SEC + commands / (RATE * BATCH);
  const during = rig.emulator.log.filter((l) => l.at < stormEnd);
  const after = rig.emulator.log.filter((l) => l.at >= stormEnd);
  const refusedAfter = after.filter((l) => l.status === 503 || l.status === 429).length;
  const batchesAfter = after.filter((l) => l.method === "batch");
  const sentAfter = batchesAfter.reduce((s, l) => s + (l.batchSize ?? 0), 0);
  const firstOk = after.find((l) => l.status === 200);
  console.log(
    `  storm: ${during.length} requests refused in ${STORM_SEC} s; after it: first success ${firstOk ? ((firstOk.at - stormEnd) / 1000).toFixed(1) : "-"} s later, ` +
      `${batchesAfter.length} batch requests, ${(sentAfter / Math.max(1, batchesAfter.length)).toFixed(1)} commands per request`,
  );
  console.log(
    `  drained ${commands} commands of ${USERS} users in ${drain.toFixed(1)} s; ideal ${ideal.toFixed(1)} s (storm + ${commands} ÷ ${RATE * BATCH}/s)`,
  );
  console.log(
    `  goals: drain ÷ ideal ${(drain / ideal).toFixed(3)} (<= 1.05: ${drain / ideal <= 1.05 ? "met" : "NOT met"}), ` +
      `requests refused after the storm ${refusedAfter} (0: ${refusedAfter === 0 ? "met" : "NOT met"}); ${machineLine()}`,
  );
} finally {
  await rig.stopAll();
  await stopBenchServer();
}
