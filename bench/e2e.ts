// npm run bench:e2e — App->CRM lag and drain rate against the emulator with 100 ms latency, with the
// production default settings (2 requests/s, burst 5, batch 20, 200 ms max wait, 2 in flight).
//   phase 1: 100 new users per minute for 3 minutes; lag from the App's commit to the Contact written
//   phase 2: a backlog of 2 000 users; drain rate and its ratio to rate × batch size
// Env: BENCH_MINUTES (default 3), BENCH_PER_MINUTE (100), BENCH_BACKLOG (2000), BENCH_SETUP_SQL (a
// variant applied once the rig runs, as bench:engine applies it: bench/variants/).
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { stepGroups } from "../src/observability/metrics.js";
import { startRig } from "../test/helpers/e2e.js";
import { randomPhone } from "../test/helpers/factories.js";

const MINUTES = Number(process.env.BENCH_MINUTES ?? 3);
const PER_MINUTE = Number(process.env.BENCH_PER_MINUTE ?? 100);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 2000);
const RATE = 2;
const BATCH = 20;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
}

const rig = await startRig({
  settings: {
    "worker.poll_interval_ms": 2000,
    "batch.size": BATCH,
    "batch.max_wait_ms": 200,
    "limiter.refill_per_sec": RATE,
    "limiter.burst": 5,
    "limiter.max_in_flight": 2,
    "lease.ttl_sec": 60,
    "retry.base_ms": 1000,
    "retry.max_ms": 300000,
  },
  emulator: { latencyMs: 100 },
});
if (process.env.BENCH_SETUP_SQL) {
  await rig.db.pool.query(readFileSync(process.env.BENCH_SETUP_SQL, "utf8"));
  console.log(`variant: ${process.env.BENCH_SETUP_SQL} applied`);
}
// When the portal wrote each Contact (the store keeps seconds only).
const written = new Map<number, number>();
const store = rig.emulator.store;
const create = store.createContact.bind(store);
store.createContact = (c) => {
  const r = create(c);
  written.set(r.id, Date.now());
  return r;
};

async function insertUsers(n: number): Promise<Map<string, number>> {
  const ids = Array.from({ length: n }, () => randomUUID());
  const phones = ids.map(() => randomPhone());
  await rig.db.pool.query(
    `with u as (insert into han_app.user_identity (id, phone_number) select * from unnest($1::uuid[], $2::text[]) returning id)
     insert into han_app.client_profile (user_id) select id from u`,
    [ids, phones],
  );
  const at = Date.now();
  return new Map(ids.map((id) => [id, at]));
}

async function waitAll(n: number, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await rig.db.pool.query(
      "select count(*)::int as n from bitrix_sync.workflow_instances where state = 'succeeded'",
    );
    if (rows[0].n >= n) return;
    if (Date.now() > end) throw new Error(`only ${rows[0].n} of ${n} workflows finished`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

try {
  await rig.startWorker();
  // Phase 1: steady arrivals, one user at a time, evenly spaced.
  const commits = new Map<string, number>();
  const total = MINUTES * PER_MINUTE;
  const gap = 60_000 / PER_MINUTE;
  const t0 = Date.now();
  for (let i = 0; i < total; i++) {
    const due = t0 + i * gap;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    for (const [id, at] of await insertUsers(1)) commits.set(id, at);
  }
  await waitAll(total, 120_000);
  const { rows } = await rig.db.pool.query<{ entity_id: string; external_id: string }>(
    "select entity_id, external_id from bitrix_sync.entity_external_mapping where status = 'active'",
  );
  const lags: number[] = [];
  const timeline: Array<[number, number]> = [];
  for (const r of rows) {
    const c = commits.get(r.entity_id);
    const w = written.get(Number(r.external_id));
    if (c !== undefined && w !== undefined) {
      lags.push(w - c);
      timeline.push([c - t0, w - c]);
    }
  }
  if (process.env.BENCH_VERBOSE) {
    timeline.sort((a, b) => b[1] - a[1]);
    console.log(
      "  slowest (offset s, lag ms):",
      timeline
        .slice(0, 12)
        .map(([o, l]) => `${(o / 1000).toFixed(1)}:${l}`)
        .join(" "),
    );
  }
  console.log(`phase 1: ${total} users at ${PER_MINUTE}/min for ${MINUTES} min, CRM latency 100 ms`);
  console.log(
    `  App commit -> Contact written: p50 ${pct(lags, 50)} ms, p99 ${pct(lags, 99)} ms, max ${Math.max(...lags)} ms (n=${lags.length}; spec limit 30 000 ms, goal p99 <= 1 500 ms)`,
  );

  // Phase 2: a backlog drained at the limiter's pace.
  const before = rig.emulator.log.length;
  const cmdsBefore = (await rig.db.pool.query("select count(*)::int as n from bitrix_sync.crm_commands"))
    .rows[0].n as number;
  const start = Date.now();
  await insertUsers(BACKLOG);
  await waitAll(total + BACKLOG, 30 * 60_000);
  const seconds = (Date.now() - start) / 1000;
  const cmds =
    ((await rig.db.pool.query("select count(*)::int as n from bitrix_sync.crm_commands")).rows[0]
      .n as number) - cmdsBefore;
  const requests = rig.emulator.log.length - before;
  const opsPerSec = cmds / seconds;
  const groups = (await stepGroups.get()).values;
  const byOutcome = (o: string) => groups.find((v) => v.labels.outcome === o)?.value ?? 0;
  console.log(
    `step groups (both phases): ${byOutcome("committed")} committed, ${byOutcome("alone")} rolled back and run step by step`,
  );
  console.log(`phase 2: backlog of ${BACKLOG} users drained in ${seconds.toFixed(1)} s`);
  console.log(
    `  ${(BACKLOG / seconds).toFixed(2)} users/s, ${opsPerSec.toFixed(2)} CRM ops/s over ${requests} requests (${(cmds / requests).toFixed(1)} commands/request)`,
  );
  console.log(
    `  ratio to rate x batch size (${RATE} x ${BATCH} = ${RATE * BATCH}/s): ${(opsPerSec / (RATE * BATCH)).toFixed(3)} (goal >= 0.95)`,
  );
} finally {
  await rig.close();
}
