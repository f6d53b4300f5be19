// The silent-failure alerts (group bitrix-sync-health of deploy/prometheus/bitrix-sync.rules.yml, and
// the spike of §10.2) fire in a real Prometheus (Debian's, on loopback, scraping and evaluating every
// second) that scrapes the running service (the e2e rig over HTTP), each once its condition exists in
// the real database: reconciliation runs failing against the emulator in outage, a cursor trailing,
// an uncertain write, a workflow parked or retrying for long, an inbox event waiting, alerts that
// cannot reach the smart process, a dead letter left open, a deleted smart-process item, a quiet
// portal's lost webhook. Before any of that, none fires; acknowledging the dead letter and keeping
// alerts in the database on purpose resolve theirs.
//
// The rules are the file's own, only their `for:` durations rewritten to 1s.
import { randomUUID } from "node:crypto";
import test from "ava";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser } from "../helpers/factories.js";
import { hasPrometheus, type RunningPrometheus, rulesNamed, startPrometheus } from "../helpers/prometheus.js";
import { type RigHttp, serveRig } from "../helpers/rig-http.js";
import { setSettings } from "../helpers/settings.js";

const run = hasPrometheus ? test.serial : test.skip;
if (!hasPrometheus) {
  console.warn("health-alerts.test.ts: SKIPPED, prometheus is not installed (apt-get install -y prometheus)");
}

const ALERTS = [
  "BitrixSyncReconciliationFailing",
  "BitrixSyncReconciliationLagging",
  "BitrixSyncCommandsUncertain",
  "BitrixSyncWorkflowsWaitingManual",
  "BitrixSyncWorkflowsRetryingLong",
  "BitrixSyncWebhookInboxStuck",
  "BitrixSyncBusinessAlertsNotMirrored",
  "BitrixSyncDeadLettersOpen",
  "BitrixSyncAlertItemsDeleted",
  "BitrixSyncWebhooksPossiblyLost",
] as const;

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
  groups: Array<{ rules: Array<{ name: string; state?: string; health: string }> }>;
}

async function rules(p: RunningPrometheus) {
  return (await p.api<RuleGroups>("rules?type=alert")).groups.flatMap((g) => g.rules);
}

async function firing(p: RunningPrometheus, name: string): Promise<Alert[]> {
  const data = await p.api<{ alerts: Alert[] }>("alerts");
  return data.alerts.filter((a) => a.labels.alertname === name && a.state === "firing");
}

const fires = (p: RunningPrometheus, name: string) =>
  waitFor(
    async () => {
      const a = await firing(p, name);
      return a.length > 0 ? a : null;
    },
    30_000,
    `${name} firing`,
  );

/** Rows in a state they only reach after a while, written as the owner with the row guards off. */
async function asHistory(r: Rig, sql: string, params: unknown[] = []) {
  const c = await r.db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local session_replication_role = replica");
    const res = await c.query(sql, params);
    await c.query("commit");
    return res.rows;
  } finally {
    c.release();
  }
}

run("each silent failure fires its alert in Prometheus once its condition exists", async (t) => {
  rig = await startRig({ settings: { "reconcile.recovered_spike_threshold": 20 } });
  const r = rig;
  // A linked user, for the lost webhook below; then the loop stops, so nothing moves the rows this
  // test writes (processing stays enabled: the service would claim them).
  await r.startWorker();
  const u = await makeUser(r.db.pool);
  t.is((await finishedWorkflow(r, u.id)).state, "succeeded");
  await r.stopWorker();
  const s = () => r.runtime.settings.get().reconcile;
  t.is((await reconcileContacts(r.runtime.services, s(), { force: true })).status, "succeeded");

  http = await serveRig(r);
  const p = await startPrometheus(http.target, rulesNamed(ALERTS, "1s"));
  prometheus = p;
  await waitFor(
    async () => {
      const list = await rules(p);
      return list.length === ALERTS.length && list.every((x) => x.health === "ok") ? list : null;
    },
    30_000,
    "every rule evaluated",
  );
  await new Promise((res) => setTimeout(res, 3000)); // a few scrapes and evaluations of the healthy state
  for (const x of await rules(p)) t.is(x.state, "inactive", `${x.name}: a healthy service fires nothing`);

  // Reconciliation: three runs fail against a portal in outage (each with its sends within the run).
  r.emulator.setOutage("INTERNAL_SERVER_ERROR");
  for (let i = 0; i < 3; i++) {
    t.is((await reconcileContacts(r.runtime.services, s(), { force: true })).status, "failed");
  }
  r.emulator.setOutage(null);
  t.like((await fires(p, "BitrixSyncReconciliationFailing"))[0]?.labels, { job_type: "contacts" });

  // The contact cursor trails by two hours (three intervals are 45 minutes).
  await r.db.pool.query(
    "update bitrix_sync.reconciliation_cursors set watermark = now() - interval '2 hours' where job_type = 'contacts'",
  );
  t.like((await fires(p, "BitrixSyncReconciliationLagging"))[0]?.labels, { job_type: "contacts" });

  // A workflow retrying for two hours whose create went unanswered twenty minutes ago, and one
  // parked for a person for two days.
  const [wf] = await asHistory(
    r,
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, created_at, next_attempt_at)
     values ('contact.map_or_create', 'contact.map_or_create', $1, 'waiting_retry', now() - interval '2 hours', now() + interval '1 day')
     returning id`,
    [randomUUID()],
  );
  await asHistory(
    r,
    `insert into bitrix_sync.crm_commands (workflow_id, command_type, status, sent_at, created_at)
     values ($1, 'contact.add', 'uncertain', now() - interval '20 minutes', now() - interval '20 minutes')`,
    [wf.id],
  );
  await asHistory(
    r,
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, created_at)
     values ('contact.update', 'contact.update', $1, 'waiting_manual', now() - interval '2 days')`,
    [randomUUID()],
  );
  t.like((await fires(p, "BitrixSyncCommandsUncertain"))[0]?.labels, { command_type: "contact.add" });
  t.like((await fires(p, "BitrixSyncWorkflowsRetryingLong"))[0]?.labels, {
    workflow_type: "contact.map_or_create",
  });
  t.like((await fires(p, "BitrixSyncWorkflowsWaitingManual"))[0]?.labels, {
    workflow_type: "contact.update",
  });

  // A robot call recorded ten minutes ago and not processed.
  await asHistory(
    r,
    `insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, received_at, status_at)
     values ('contact', 3, '424242', now() - interval '10 minutes', now() - interval '10 minutes')`,
  );
  t.like((await fires(p, "BitrixSyncWebhookInboxStuck"))[0]?.labels, { receiver: "contact" });

  // An alert raised an hour ago that cannot reach the smart process (alerts.entity_type_id unset,
  // alerts.database_only false: the default).
  const [alert] = await asHistory(
    r,
    `select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('d', 64), gen_random_uuid())`,
  );
  await asHistory(
    r,
    "update bitrix_sync.business_alerts set created_at = now() - interval '1 hour' where id = $1",
    [alert.id],
  );
  await fires(p, "BitrixSyncBusinessAlertsNotMirrored");

  // A technical dead letter open for two hours.
  const [dead] = await asHistory(
    r,
    `insert into bitrix_sync.technical_dead_letters (source, source_id, operation, error_code, created_at)
     values ('crm_command', '1', 'contact.update', 'invalid_argument', now() - interval '2 hours') returning id`,
  );
  t.like((await fires(p, "BitrixSyncDeadLettersOpen"))[0]?.labels, { source: "crm_command" });

  // The item of an open alert deleted in the CRM (the counter was scraped at 0 before).
  await r.db.pool.query("select bitrix_sync.finish_business_alert($1, 'remote_missing', null)", [alert.id]);
  await fires(p, "BitrixSyncAlertItemsDeleted");

  // A quiet portal loses the only webhook of the only change: the spike by share.
  const { rows: m } = await r.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = r.emulator.store.contacts.get(Number(m[0]?.external_id));
  if (!contact) return t.fail("the user has no Contact");
  contact.name = "Changed without a robot";
  r.emulator.store.touch(contact);
  const quiet = await reconcileContacts(r.runtime.services, { ...s(), overlapSec: 0 }, { force: true });
  t.like(quiet, { status: "succeeded", recovered: 1, spike: true });
  await fires(p, "BitrixSyncWebhooksPossiblyLost");

  // What clears them: the dead letter acknowledged; alerts kept in the database on purpose.
  await r.db.pool.query(
    "select bitrix_sync.acknowledge_dead_letter($1, 'ops:test', 'looked at in the test')",
    [dead.id],
  );
  await setSettings(r.db, { "alerts.database_only": true });
  for (const name of ["BitrixSyncDeadLettersOpen", "BitrixSyncBusinessAlertsNotMirrored"]) {
    await waitFor(
      async () => ((await firing(p, name)).length === 0 ? true : null),
      30_000,
      `${name} resolved`,
    );
  }
  t.pass();
});
