// npm run bench:outage — the portal answers HTTP 500 to every call for 2 minutes while 40 new users
// arrive (evenly spread), then answers normally again at its real limit (2 requests/s). Retries have
// backed off by then; the pump notices the recovery (a probe, or the first success) and brings them
// forward through the limiter. Prints how long after the recovery the last user was synced (goal
// <= 15 s), and the requests refused after it (goal: none; no thundering herd).
// Env: BENCH_USERS (default 40), BENCH_OUTAGE_SEC (default 120), BENCH_DATABASE_URL.
import {
  countCommands,
  insertUsers,
  machineLine,
  startBenchRig,
  stopBenchServer,
  waitSucceeded,
} from "./engine-rig.js";

const USERS = Number(process.env.BENCH_USERS ?? 40);
const OUTAGE_SEC = Number(process.env.BENCH_OUTAGE_SEC ?? 120);
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
    `bench:outage — HTTP 500 to every call for ${OUTAGE_SEC} s while ${USERS} users arrive; ${machineLine()}`,
  );
  rig.emulator.failNext("INTERNAL_SERVER_ERROR", { times: Number.MAX_SAFE_INTEGER });
  await rig.startWorker();
  const t0 = Date.now();
  const gap = (OUTAGE_SEC * 1000) / USERS;
  for (let i = 0; i < USERS; i++) {
    const due = t0 + i * gap;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    await insertUsers(rig, 1);
  }
  const end = t0 + OUTAGE_SEC * 1000;
  if (end > Date.now()) await new Promise((r) => setTimeout(r, end - Date.now()));
  const { rows } = await rig.db.pool.query<{ waiting: number; latest: number | null }>(
    `select /* bench */ count(*)::int as waiting,
            extract(epoch from max(next_attempt_at) - now())::float8 as latest
       from bitrix_sync.crm_commands where status = 'retry_wait'`,
  );
  rig.emulator.clearFaults();
  const up = Date.now();
  await waitSucceeded(rig, USERS, 30 * 60_000, 50);
  const done = Date.now();
  const commands = await countCommands(rig);
  const during = rig.emulator.log.filter((l) => l.at < up);
  const after = rig.emulator.log.filter((l) => l.at >= up);
  const refusedAfter = after.filter((l) => l.status === 503 || l.status === 429).length;
  const firstOk = after.find((l) => l.status === 200);
  const batches = after.filter((l) => l.method === "batch");
  console.log(
    `  outage: ${during.length} requests answered 500; when it ended ${rows[0]?.waiting ?? 0} commands waited in retry_wait, ` +
      `the latest due in ${(rows[0]?.latest ?? 0).toFixed(0)} s`,
  );
  console.log(
    `  after it: first success ${firstOk ? ((firstOk.at - up) / 1000).toFixed(1) : "-"} s later, ${batches.length} batch requests ` +
      `(${batches.map((l) => l.batchSize ?? 0).join(", ")} commands), ${commands} commands in all`,
  );
  const drain = (done - up) / 1000;
  console.log(
    `  goals: last user synced ${drain.toFixed(1)} s after the portal answered again (<= 15: ${drain <= 15 ? "met" : "NOT met"}), ` +
      `requests refused after it ${refusedAfter} (0: ${refusedAfter === 0 ? "met" : "NOT met"}); ${machineLine()}`,
  );
} finally {
  await rig.stopAll();
  await stopBenchServer();
}
