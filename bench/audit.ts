// npm run bench:audit — the sampled convergence audit's share of the portal's budget while sync
// traffic runs against the emulator, with the production default limiter (2 requests/s, burst 5,
// 2 in flight) and audit.budget_share 0.05. App traffic is phone changes of linked users (each a
// contact.update: a read and a write, two requests). Four phases: light traffic alone, the same
// with sampled audit runs back to back, then traffic that uses the whole budget, alone and with the
// audit. Each audit run wants every link and every page of registered Contacts (period 1 day,
// interval 1 day): the audit is always hungry, so what it gets is what the limiter gives it. The
// share bucket holds one request, so a window of t seconds allows 1 + share × rate × t of them.
// Prints, per phase, the
// HTTP requests sent, the audit's requests as a share of the budget (limiter.refill_per_sec ×
// seconds) and of all requests, the portal's limit refusals, the sync path's mean wait for a permit
// and the sync lag (intent recorded -> workflow finished).
// Env: BENCH_LINKS (default 2000), BENCH_REGISTERED (unlinked registered Contacts, default 3000),
// BENCH_SECONDS (per phase, default 60), BENCH_LIGHT_PER_SEC (default 0.25 changes/s),
// BENCH_FULL_PER_SEC (default 1 change/s, about 2 requests/s: the whole budget).
import { randomUUID } from "node:crypto";
import { runConvergenceAudit } from "../src/audit/run.js";
import { SANDBOX_FIELDS } from "../src/config/env.js";
import { limiterWait } from "../src/observability/metrics.js";
import { startRig } from "../test/helpers/e2e.js";

const LINKS = Number(process.env.BENCH_LINKS ?? 2000);
const REGISTERED = Number(process.env.BENCH_REGISTERED ?? 3000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const LIGHT_PER_SEC = Number(process.env.BENCH_LIGHT_PER_SEC ?? 0.25);
const FULL_PER_SEC = Number(process.env.BENCH_FULL_PER_SEC ?? 1);
const REFILL = 2;
const SHARE = 0.05;

const rig = await startRig({
  settings: {
    "limiter.refill_per_sec": REFILL,
    "limiter.burst": 5,
    "limiter.max_in_flight": 2,
    "batch.size": 20,
    "audit.enabled": false,
    "audit.budget_share": SHARE,
    "audit.period_days": 1,
    "audit.interval_sec": 86400,
    "audit.run_budget_sec": 3600,
    "reconcile.contacts_interval_sec": 86400,
  },
});
const F = SANDBOX_FIELDS;
try {
  // Linked users, written without intents as if linked earlier, and their Contacts.
  const users: string[] = [];
  const phones: string[] = [];
  const contacts: number[] = [];
  for (let i = 0; i < LINKS; i++) {
    const id = randomUUID();
    const phone = `+7900${String(i).padStart(7, "0")}`;
    const c = rig.emulator.store.createContact({
      name: "Bench User",
      phones: [{ value: phone, valueType: "MOBILE" }],
      uf: { [F.userId]: id, [F.registered]: 1 },
    });
    users.push(id);
    phones.push(phone);
    contacts.push(c.id);
  }
  for (let i = 0; i < REGISTERED; i++) {
    rig.emulator.store.createContact({
      name: "Elsewhere",
      uf: { [F.userId]: randomUUID(), [F.registered]: 1 },
    });
  }
  const c = await rig.db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local han.sync_suppress = 'true'");
    await c.query(
      "insert into han_app.user_identity (id, phone_number) select u, p from unnest($1::uuid[], $2::text[]) t(u, p)",
      [users, phones],
    );
    await c.query(
      "insert into han_app.client_profile (user_id, full_name) select u, 'Bench User' from unnest($1::uuid[]) u",
      [users],
    );
    await c.query(
      `insert into bitrix_sync.entity_external_mapping (entity_id, external_id)
       select u, c::text from unnest($1::uuid[], $2::bigint[]) as t(u, c)`,
      [users, contacts],
    );
    await c.query("commit");
  } finally {
    c.release();
  }
  await rig.startWorker();

  let changed = 0;
  /** App traffic for `seconds`: a phone change of the next user every 1/perSec s. */
  async function traffic(seconds: number, perSec: number): Promise<void> {
    const end = Date.now() + seconds * 1000;
    while (Date.now() < end) {
      const i = changed++ % LINKS;
      await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
        users[i],
        `+7910${String(changed).padStart(7, "0")}`,
      ]);
      await new Promise((r) => setTimeout(r, 1000 / perSec));
    }
  }

  /** The sync path's permit waits so far (the spare limiter does not count there): sum and count. */
  async function syncWaits(): Promise<{ sum: number; count: number }> {
    const m = await limiterWait.get();
    const pick = (suffix: string) =>
      m.values
        .filter(
          (v) =>
            v.metricName === `bitrix_sync_limiter_wait_seconds_${suffix}` && v.labels.outcome === "granted",
        )
        .reduce((a, v) => a + v.value, 0);
    return { sum: pick("sum"), count: pick("count") };
  }

  async function phase(name: string, perSec: number, withAudit: boolean) {
    const waitsBefore = await syncWaits();
    const from = Date.now();
    const logFrom = rig.emulator.log.length;
    let auditRequests = 0;
    let auditRuns = 0;
    const stop = new AbortController();
    const auditing = (async () => {
      while (withAudit && !stop.signal.aborted) {
        const r = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), {
          force: true,
          signal: stop.signal,
        });
        auditRequests += r.requests;
        auditRuns++;
        if (!r.ran) await new Promise((res) => setTimeout(res, 200));
      }
    })();
    await traffic(SECONDS, perSec);
    // The run in progress stops when the phase ends (waiting for a permit, or before its next
    // request); what it sent is counted.
    stop.abort();
    await auditing;
    const seconds = (Date.now() - from) / 1000;
    const waitsAfter = await syncWaits();
    const permitWaitMs =
      waitsAfter.count > waitsBefore.count
        ? ((waitsAfter.sum - waitsBefore.sum) / (waitsAfter.count - waitsBefore.count)) * 1000
        : 0;
    const sent = rig.emulator.log.slice(logFrom);
    const refused = sent.filter((e) => e.status === 503 || e.status === 429).length;
    // Let the last changes finish, then measure their lag.
    await new Promise((r) => setTimeout(r, 5000));
    const { rows } = await rig.db.pool.query<{ p50: number; p95: number; n: number }>(
      `select percentile_cont(0.5) within group (order by lag) as p50,
              percentile_cont(0.95) within group (order by lag) as p95, count(*)::int as n
         from (select extract(epoch from w.finished_at - q.created_at) as lag
                 from bitrix_sync.workflow_instances w
                 join han_app.sync_queue q on q.id = w.source_task_id
                where w.intent_type = 'contact.update' and w.state = 'succeeded'
                  and q.created_at >= to_timestamp($1 / 1000.0)
                  and q.created_at < to_timestamp($2 / 1000.0)) l`,
      [from, from + SECONDS * 1000],
    );
    const lag = rows[0];
    return {
      name: `${name} (${perSec}/s)`,
      seconds,
      requests: sent.length,
      auditRequests,
      auditRuns,
      refused,
      budgetShare: auditRequests / (REFILL * seconds),
      requestShare: sent.length === 0 ? 0 : auditRequests / sent.length,
      permitWaitMs,
      lag,
    };
  }

  const results = [
    await phase("light, sync only", LIGHT_PER_SEC, false),
    await phase("light + audit", LIGHT_PER_SEC, true),
    await phase("full, sync only", FULL_PER_SEC, false),
    await phase("full + audit", FULL_PER_SEC, true),
  ];
  console.log(
    `bench:audit: ${LINKS} linked users, ${REGISTERED} other registered Contacts, phone changes per second as shown, limiter ${REFILL} req/s (burst 5), audit.budget_share ${SHARE}`,
  );
  console.log(
    "phase                      seconds  requests  audit req  audit runs  audit/budget  audit/requests  refusals  sync permit wait  sync lag p50  p95   (updates)",
  );
  for (const r of results) {
    console.log(
      `${r.name.padEnd(27)}${r.seconds.toFixed(0).padStart(7)}  ${String(r.requests).padStart(8)}  ${String(r.auditRequests).padStart(9)}  ${String(r.auditRuns).padStart(10)}  ${(r.budgetShare * 100).toFixed(2).padStart(11)}%  ${(r.requestShare * 100).toFixed(2).padStart(13)}%  ${String(r.refused).padStart(8)}  ${r.permitWaitMs.toFixed(1).padStart(13)} ms  ${Number(
        r.lag?.p50 ?? 0,
      )
        .toFixed(2)
        .padStart(11)}s  ${Number(r.lag?.p95 ?? 0).toFixed(2)}s  (${r.lag?.n ?? 0})`,
    );
  }
  for (const r of results.filter((x) => x.auditRuns > 0)) {
    console.log(
      `${r.name}: the sampled audit used ${(r.budgetShare * 100).toFixed(2)} % of the portal's budget (cap ${SHARE * 100} %)`,
    );
  }
} finally {
  await rig.close();
}
