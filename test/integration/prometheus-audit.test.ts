// The convergence audit's alerts in a real Prometheus (Debian's `prometheus`, scraping the running
// service every two seconds, as a scrape may outlast one on a loaded machine, with the project's
// rules, their `for:` rewritten to 1s as in prometheus.test.ts): a Contact deleted by a manager is found by the audit and fires
// BitrixSyncConvergenceDrift until it is repaired; an audit whose runs fail while its last success
// ages past three intervals fires BitrixSyncConvergenceAuditStopped, which resolves once a run
// succeeds again.
import test, { type ExecutionContext } from "ava";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser } from "../helpers/factories.js";
import {
  hasPrometheus,
  type RunningPrometheus,
  rulesWithFor,
  startPrometheus,
} from "../helpers/prometheus.js";
import { type RigHttp, serveRig } from "../helpers/rig-http.js";
import { asRole } from "../helpers/roles.js";

const run = hasPrometheus ? test.serial : test.skip;
if (!hasPrometheus) {
  console.warn(
    "prometheus-audit.test.ts: SKIPPED, prometheus is not installed (apt-get install -y prometheus)",
  );
}

let rig: Rig | undefined;
let http: RigHttp | undefined;
let prometheus: RunningPrometheus | undefined;

test.after.always(async () => {
  await prometheus?.stop();
  await http?.close();
  await rig?.close();
});

interface Alert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: string;
}

async function firing(p: RunningPrometheus, name: string): Promise<Alert | undefined> {
  const data = await p.api<{ alerts: Alert[] }>("alerts");
  return data.alerts.find((a) => a.labels.alertname === name && a.state === "firing");
}

async function ruleState(p: RunningPrometheus, name: string): Promise<string | undefined> {
  const data = await p.api<{
    groups: Array<{ rules: Array<{ name: string; state?: string; health: string }> }>;
  }>("rules?type=alert");
  const r = data.groups.flatMap((g) => g.rules).find((x) => x.name === name);
  return r?.health === "ok" ? r.state : undefined;
}

/** Queues an audit run as the admin and waits until a run finished after it (succeeded or failed). */
async function auditNow(r: Rig, all: boolean, want: "succeeded" | "failed"): Promise<void> {
  const before = new Date();
  await asRole(r.db.pool, "bitrix_sync_admin", (c) =>
    c.query("select bitrix_sync.request_convergence_audit('ops:test', 'a test needs a run now', $1)", [all]),
  );
  await waitFor(
    async () => {
      const { rows } = await r.db.pool.query(
        "select last_run_status, last_run_started_at from bitrix_sync.audit_state",
      );
      const s = rows[0];
      return s && s.last_run_started_at >= before && s.last_run_status === want;
    },
    60_000,
    `an audit run that ${want}`,
  );
}

/**
 * What stood when a wait ran out, for the next reader of a failure: the audit's state row, the audit
 * series Prometheus last scraped, and both rules' states.
 */
async function explain(r: Rig | undefined, p: RunningPrometheus | undefined): Promise<string[]> {
  const out: string[] = [];
  if (r) {
    const { rows } = await r.db.pool.query(
      "select last_run_status, last_run_started_at, last_success_at, now() as now from bitrix_sync.audit_state",
    );
    out.push(`audit_state ${JSON.stringify(rows[0])}`);
  }
  if (p) {
    const q = await p.api<{ result: Array<{ metric: Record<string, string>; value: [number, string] }> }>(
      `query?query=${encodeURIComponent('{__name__=~"bitrix_sync_audit_.*|bitrix_sync_drift_.*|up"}')}`,
    );
    for (const x of q.result) out.push(`${x.metric.__name__}${JSON.stringify(x.metric)} = ${x.value[1]}`);
    const targets = await p.api<{
      activeTargets: Array<{
        health: string;
        lastError: string;
        lastScrape: string;
        lastScrapeDuration: number;
      }>;
    }>("targets");
    for (const x of targets.activeTargets)
      out.push(`target ${x.health} last scrape ${x.lastScrape} (${x.lastScrapeDuration} s) ${x.lastError}`);
    for (const name of ["BitrixSyncConvergenceDrift", "BitrixSyncConvergenceAuditStopped"])
      out.push(`${name}: ${await ruleState(p, name)}`);
  }
  return out;
}

run(
  "drift found by the audit fires BitrixSyncConvergenceDrift; a stopped audit fires BitrixSyncConvergenceAuditStopped",
  async (t) => {
    try {
      await scenario(t);
    } catch (e) {
      t.log(...(await explain(rig, prometheus).catch((x: unknown) => [`(no explanation: ${String(x)})`])));
      throw e;
    }
  },
);

async function scenario(t: ExecutionContext): Promise<void> {
  const r = await startRig({
    settings: { "audit.grace_sec": 0, "audit.interval_sec": 60, "reconcile.contacts_interval_sec": 86400 },
  });
  rig = r;
  await r.startWorker();
  http = await serveRig(r);
  const user = await makeUser(r.db.pool);
  t.is((await finishedWorkflow(r, user.id)).state, "succeeded");
  // A fresh success, so neither rule has a reason to fire when Prometheus starts.
  await auditNow(r, true, "succeeded");

  const p = await startPrometheus(http.target, rulesWithFor("1s"), [], 2);
  prometheus = p;
  await waitFor(
    async () => (await ruleState(p, "BitrixSyncConvergenceDrift")) === "inactive",
    30_000,
    "the drift rule evaluated",
  );
  t.is(await ruleState(p, "BitrixSyncConvergenceAuditStopped"), "inactive");

  // A manager deletes the linked Contact; nothing tells the service, the audit finds it.
  const { rows } = await r.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [user.id],
  );
  r.emulator.store.contacts.delete(Number(rows[0]?.external_id));
  await auditNow(r, true, "succeeded");
  const drift = await waitFor(() => firing(p, "BitrixSyncConvergenceDrift"), 30_000, "the drift alert");
  t.like(drift, {
    labels: { severity: "warning", job: "bitrix-sync", kind: "contact_missing" },
    annotations: { runbook: "docs/runbook.md#bitrixsyncconvergencedrift" },
  });
  // Repaired (§5.2: the link is broken, a person is told), and the next audit finds nothing.
  await asRole(r.db.pool, "bitrix_sync_admin", (c) =>
    c.query("select * from bitrix_sync.repair_drift('ops:test', 'the Contact was deleted by mistake')"),
  );
  t.is((await finishedWorkflow(r, user.id, 30_000)).outcome, "contact_missing");
  await auditNow(r, true, "succeeded");
  await waitFor(
    async () => (await ruleState(p, "BitrixSyncConvergenceDrift")) === "inactive",
    30_000,
    "the drift alert resolved",
  );

  // The portal fails every request: audit runs fail. Its last success is made three intervals old,
  // as three minutes of failing runs would leave it.
  r.emulator.setOutage("INTERNAL_SERVER_ERROR");
  await auditNow(r, false, "failed");
  await r.db.pool.query("update bitrix_sync.audit_state set last_success_at = now() - interval '4 minutes'");
  const stopped = await waitFor(
    () => firing(p, "BitrixSyncConvergenceAuditStopped"),
    30_000,
    "the audit-stopped alert",
  );
  t.like(stopped, {
    labels: { severity: "warning", job: "bitrix-sync" },
    annotations: { runbook: "docs/runbook.md#bitrixsyncconvergenceauditstopped" },
  });
  // The portal is back: the next run succeeds, and the alert resolves.
  r.emulator.setOutage(null);
  await auditNow(r, false, "succeeded");
  await waitFor(
    async () => (await ruleState(p, "BitrixSyncConvergenceAuditStopped")) === "inactive",
    30_000,
    "the audit-stopped alert resolved",
  );
  t.is(await firing(p, "BitrixSyncConvergenceAuditStopped"), undefined);
}
