// A real Prometheus (Debian's `prometheus`, on loopback, its own temporary data folder, scraping and
// evaluating every second) scrapes the running service (the e2e rig over HTTP) with the project's
// alert rules. While the portal refuses the CRM credential (401), BitrixSyncCrmCredentialRejected
// fires; once the credential works again and a request succeeds, it resolves.
//
// The rules are deploy/prometheus/bitrix-sync.rules.yml with only their `for:` durations rewritten
// to 1s (a test cannot wait minutes); every expression, label and annotation is the file's own.
import test from "ava";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser } from "../helpers/factories.js";
import {
  hasPrometheus,
  type RunningPrometheus,
  rulesWithFor,
  startPrometheus,
} from "../helpers/prometheus.js";
import { type RigHttp, serveRig } from "../helpers/rig-http.js";

const run = hasPrometheus ? test.serial : test.skip;
if (!hasPrometheus) {
  console.warn("prometheus.test.ts: SKIPPED, prometheus is not installed (apt-get install -y prometheus)");
}

const ALERT = "BitrixSyncCrmCredentialRejected";

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
interface RuleGroups {
  groups: Array<{
    rules: Array<{ name: string; type: string; state?: string; health: string; alerts?: Alert[] }>;
  }>;
}

async function rule(p: RunningPrometheus) {
  const data = await p.api<RuleGroups>("rules?type=alert");
  return data.groups.flatMap((g) => g.rules).find((r) => r.name === ALERT);
}

async function firing(p: RunningPrometheus): Promise<Alert | undefined> {
  const data = await p.api<{ alerts: Alert[] }>("alerts");
  return data.alerts.find((a) => a.labels.alertname === ALERT && a.state === "firing");
}

run(
  "a rejected CRM credential fires BitrixSyncCrmCredentialRejected in Prometheus, and it resolves after",
  async (t) => {
    rig = await startRig();
    await rig.startWorker();
    http = await serveRig(rig);
    const first = await makeUser(rig.db.pool);
    t.is((await finishedWorkflow(rig, first.id)).state, "succeeded");

    const p = await startPrometheus(http.target, rulesWithFor("1s"));
    prometheus = p;
    await waitFor(
      async () => {
        const data = await p.api<{ activeTargets: Array<{ health: string }> }>("targets");
        return data.activeTargets[0]?.health === "up";
      },
      30_000,
      "Prometheus scraping the service",
    );
    await waitFor(async () => (await rule(p))?.health === "ok", 30_000, "the rule evaluated");
    t.is((await rule(p))?.state, "inactive", "a healthy service fires nothing");

    // The webhook is deleted in the portal: every call answers 401 INVALID_CREDENTIALS.
    rig.emulator.revokeCredential();
    await makeUser(rig.db.pool);
    await waitFor(async () => rig?.runtime.health.credentialProblem !== null, 30_000, "a refused CRM call");
    const alert = await waitFor(() => firing(p), 30_000, `${ALERT} firing`);
    t.like(alert, {
      labels: { alertname: ALERT, severity: "critical", job: "bitrix-sync", instance: http.target },
      annotations: { runbook: "docs/runbook.md#bitrixsynccrmcredentialrejected" },
    });
    t.is((await rule(p))?.state, "firing");

    // The credential works again; the next request succeeds and readiness clears the problem.
    rig.emulator.restoreCredential();
    const second = await makeUser(rig.db.pool);
    t.is((await finishedWorkflow(rig, second.id, 30_000)).state, "succeeded");
    await waitFor(async () => (await rule(p))?.state === "inactive", 30_000, `${ALERT} resolved`);
    t.is(await firing(p), undefined);
  },
);
