// §15 metrics, read from GET /metrics of a running service (the e2e rig over loopback HTTP) after
// one App→CRM sync, one robot webhook, one refused webhook, a business alert and a reconciliation
// run: every family docs/observability.md lists is exported with its type and labels (and nothing
// undocumented), the families those events touch have samples, no label value carries an ID,
// phone, e-mail or name, and every PromQL expression of deploy/ names only exported metrics.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { releaseSchema } from "../../src/db/schema-window.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import { projectRoot } from "../../src/local/project-root.js";
import { gitRevision } from "../../src/version.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { type MetricFamily, parseExposition, sampleNames } from "../helpers/exposition.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { alertRules, dashboardExpressions } from "../helpers/prometheus.js";
import { metricNames } from "../helpers/promql.js";
import { type RigHttp, serveRig } from "../helpers/rig-http.js";

let rig: Rig;
let http: RigHttp;
let families: Map<string, MetricFamily>;
let reconciliations = 0;
/** Personal data and IDs of this test's user, Contact and alert: none may appear in a label. */
const secrets: string[] = [];

/** The one family whose labels are the build's version and commit, not safe codes. */
const BUILD_INFO = "bitrix_sync_build_info";
const SCHEMA_INFO = "bitrix_sync_schema_info";
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { version: string }
).version;

/** What the blackbox exporter's probe of the public path exports (deploy/prometheus/blackbox.yml). */
const BLACKBOX_FAMILIES = ["probe_success", "probe_ssl_earliest_cert_expiry"];

test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
  http = await serveRig(rig);

  // One App→CRM sync.
  const phone = randomPhone();
  const u = await makeUser(rig.db.pool, { phone, fullName: "Metrika Personova" });
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contactId = Number(rows[0]?.external_id);
  const contact = rig.emulator.store.contacts.get(contactId);
  if (!contact) throw new Error("the user was not linked to a Contact");

  // One robot webhook: a manager edits the Contact, the robot calls the receiver.
  contact.name = "Metrika Webhookova";
  contact.emails = [rig.emulator.store.newMulti("WORK", "metrika.webhookova@example.test")];
  rig.emulator.store.touch(contact);
  if ((await http.contactRobot(contactId)) !== 200) throw new Error("the receiver refused the robot");
  await waitFor(async () => {
    const { rows: inbox } = await rig.db.pool.query(
      "select 1 from bitrix_sync.webhook_inbox where entity_id = $1 and status = 'processed'",
      [String(contactId)],
    );
    return inbox.length > 0;
  });
  // One refused webhook (a wrong token), and a business alert naming the user and Contacts.
  if ((await http.contactRobot(contactId, "not-the-token")) !== 403)
    throw new Error("a wrong token was accepted");
  const fingerprint = "f".repeat(64);
  await rig.db.pool.query(
    "select bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, $2, $3, null, $4, '{}', null)",
    [fingerprint, u.id, String(contactId), JSON.stringify([String(contactId + 1)])],
  );
  // The crontab's reconcile_contacts may run on its own at a minute boundary: while it holds the
  // cursor a forced run is skipped, so try again until one of ours has run.
  await waitFor(async () => {
    const report = await reconcileContacts(rig.runtime.services, rig.runtime.settings.get().reconcile, {
      force: true,
    });
    if (report.status === "failed") throw new Error(`reconciliation failed: ${report.errorCode}`);
    return report.status === "succeeded";
  });

  secrets.push(
    u.id,
    phone,
    phone.replace(/^\+/, ""),
    "Metrika",
    "Personova",
    "Webhookova",
    "metrika.webhookova@example.test",
    String(contactId),
    String(contactId + 1),
    fingerprint,
    "not-the-token",
    rig.emulator.secret,
  );
  // The runs that finished are logged once each; read them around the scrape so both agree.
  for (;;) {
    const before = reconciliationsLogged();
    const res = await fetch(`${http.url}/metrics`);
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
    families = parseExposition(await res.text());
    reconciliations = reconciliationsLogged();
    if (reconciliations === before) break;
  }
});

/** Successful Contact reconciliation runs in the service's log: the forced one, and any the crontab started. */
function reconciliationsLogged(): number {
  return rig.logs.filter((l) => l.includes('"event":"reconciliation.contacts"')).length;
}

test.after.always(async () => {
  await http?.close();
  await rig?.close();
});

interface Documented {
  name: string;
  type: string;
  labels: string[];
}

/** The `## Metrics` tables of docs/observability.md: | `name` | type | `label`, ... | meaning |. */
function documented(): Documented[] {
  const doc = readFileSync(join(projectRoot, "docs", "observability.md"), "utf8");
  const start = doc.search(/^## Metrics$/m);
  const end = doc.slice(start + 1).search(/^## /m);
  const section = doc.slice(start, end < 0 ? undefined : start + 1 + end);
  return [...section.matchAll(/^\| `(bitrix_sync_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|/gm)].map((m) => ({
    name: m[1] as string,
    type: m[2] as string,
    labels: [...(m[3] as string).matchAll(/`([a-z_]+)`/g)].map((l) => l[1] as string).sort(),
  }));
}

const ours = () => [...families.values()].filter((f) => f.name.startsWith("bitrix_sync_"));

test("every documented family is exported with its type and labels, and nothing undocumented is", (t) => {
  const docs = documented();
  t.true(docs.length >= 40, "docs/observability.md lists the families");
  t.deepEqual(
    ours()
      .map((f) => f.name)
      .sort(),
    docs.map((d) => d.name).sort(),
  );
  for (const d of docs) {
    const f = families.get(d.name);
    t.is(f?.type, d.type, `${d.name}: type`);
    const seen = new Set((f?.samples ?? []).flatMap((s) => Object.keys(s.labels)).filter((l) => l !== "le"));
    for (const l of seen) t.true(d.labels.includes(l), `${d.name}: label ${l} is documented`);
    if ((f?.samples.length ?? 0) > 0) t.deepEqual([...seen].sort(), d.labels, `${d.name}: labels`);
  }
});

test("the families one sync, one webhook, one refusal, an alert and a reconciliation touch have samples", (t) => {
  const withSamples = [
    "bitrix_sync_audit_last_success_timestamp_seconds",
    "bitrix_sync_audit_runs_total",
    "bitrix_sync_business_alerts_open",
    "bitrix_sync_business_alerts_sla_overdue",
    "bitrix_sync_claim_duration_seconds",
    "bitrix_sync_command_transitions_total",
    "bitrix_sync_crm_batch_duration_seconds",
    "bitrix_sync_crm_batch_size",
    "bitrix_sync_crm_command_outcomes_total",
    "bitrix_sync_crm_last_success_timestamp_seconds",
    "bitrix_sync_crm_rate_limited_total",
    "bitrix_sync_dead_letters_total",
    "bitrix_sync_drift_users",
    "bitrix_sync_event_loop_delay_seconds",
    "bitrix_sync_limiter_blocked_methods",
    "bitrix_sync_limiter_in_flight",
    "bitrix_sync_limiter_rate_factor",
    "bitrix_sync_limiter_throttled_seconds",
    "bitrix_sync_limiter_tokens",
    "bitrix_sync_limiter_wait_seconds",
    "bitrix_sync_mapping_invariant_violations",
    "bitrix_sync_metrics_database_up",
    "bitrix_sync_processing_enabled",
    "bitrix_sync_queue_depth",
    "bitrix_sync_queue_oldest_age_seconds",
    "bitrix_sync_readiness",
    "bitrix_sync_readiness_problem",
    "bitrix_sync_reconciliation_cursor_lag_seconds",
    "bitrix_sync_reconciliation_recovered_spike_timestamp_seconds",
    "bitrix_sync_reconciliation_recovered_total",
    "bitrix_sync_reconciliation_runs_total",
    "bitrix_sync_reconciliation_scanned_total",
    "bitrix_sync_reconciliation_updated_total",
    "bitrix_sync_webhook_accepted_total",
    "bitrix_sync_webhook_apply_lag_seconds",
    "bitrix_sync_webhook_coalesced_total",
    "bitrix_sync_webhook_processed_total",
    "bitrix_sync_webhook_rejected_total",
    "bitrix_sync_worker_heartbeat_timestamp_seconds",
    "bitrix_sync_workflow_transitions_total",
  ];
  for (const name of withSamples)
    t.true((families.get(name)?.samples.length ?? 0) > 0, `${name} has samples`);
  const value = (name: string, labels: Record<string, string> = {}) =>
    families
      .get(name)
      ?.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
      ?.value;
  t.is(value("bitrix_sync_readiness", { status: "ready" }), 1);
  t.is(value("bitrix_sync_readiness_problem", { problem: "crm_credential_rejected" }), 0);
  t.is(value("bitrix_sync_metrics_database_up"), 1);
  t.is(value("bitrix_sync_webhook_accepted_total", { receiver: "contact" }), 1);
  t.is(value("bitrix_sync_webhook_rejected_total", { receiver: "contact", reason: "token_invalid" }), 1);
  t.is(value("bitrix_sync_webhook_processed_total", { receiver: "contact", outcome: "applied" }), 1);
  t.is(value("bitrix_sync_business_alerts_open", { alert_type: "duplicate_contacts", severity: "low" }), 1);
  t.true(reconciliations >= 1, "a reconciliation run is in the log");
  t.is(value("bitrix_sync_reconciliation_runs_total", { status: "succeeded" }), reconciliations);
  t.true((value("bitrix_sync_reconciliation_scanned_total") ?? 0) >= 1);
  t.is(value("bitrix_sync_mapping_invariant_violations"), 0);
  t.true(
    (value("bitrix_sync_workflow_transitions_total", {
      workflow_type: "contact.map_or_create",
      from: "running",
      to: "succeeded",
    }) ?? 0) >= 1,
    "the workflow's last transition was counted",
  );
  t.true(
    (value("bitrix_sync_command_transitions_total", { from: "in_flight", to: "succeeded" }) ?? 0) >= 1,
    "a command's completion was counted",
  );
  t.true((value("bitrix_sync_crm_command_outcomes_total", { kind: "ok", code: "ok" }) ?? 0) >= 1);
  const heartbeat = value("bitrix_sync_worker_heartbeat_timestamp_seconds") ?? 0;
  t.true(Math.abs(Date.now() / 1000 - heartbeat) < 30, "the heartbeat is recent");
});

test("no label value carries a user or Contact ID, a phone, an e-mail, a name or a token", (t) => {
  const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
  // The build's version and commit are not codes (a commit starts with a digit as often as not),
  // nor are schemas (migration numbers); their own tests below check them.
  const values = ours()
    .filter((f) => f.name !== BUILD_INFO && f.name !== SCHEMA_INFO)
    .flatMap((f) => f.samples.flatMap((s) => Object.entries(s.labels).filter(([k]) => k !== "le")));
  t.true(values.length > 100, "there are label values to look at");
  for (const [key, value] of values) {
    for (const secret of secrets)
      t.false(value.includes(secret), `label ${key} carries ${secret.slice(0, 3)}…`);
    t.notRegex(value, UUID, `label ${key} looks like a UUID`);
    t.notRegex(value, /^[+\d][\d\s()-]*$/, `label ${key} is a number`);
    t.notRegex(value, /@/, `label ${key} looks like an e-mail`);
    t.regex(value, /^[a-z][a-z0-9_.]*$/, `label ${key}=${value} is a safe code`);
  }
});

test("bitrix_sync_schema_info names the database's schema and this release's: migration numbers", (t) => {
  const samples = families.get(SCHEMA_INFO)?.samples ?? [];
  t.is(samples.length, 1);
  t.is(samples[0]?.value, 1);
  const own = releaseSchema().number;
  t.deepEqual(
    samples[0]?.labels,
    { schema: own, release_schema: own },
    "the rig's database is at this release",
  );
});

test("bitrix_sync_build_info names the build: package.json's version and the checkout's commit", (t) => {
  const samples = families.get(BUILD_INFO)?.samples ?? [];
  t.is(samples.length, 1);
  t.is(samples[0]?.value, 1);
  // The rig runs from this checkout without BITRIX_SYNC_REVISION.
  t.deepEqual(samples[0]?.labels, { version: PACKAGE_VERSION, revision: gitRevision() ?? "unknown" });
  t.regex(samples[0]?.labels.revision ?? "", /^([0-9a-f]{40}|unknown)$/);
});

test("every PromQL expression of the rules and the dashboard names only metrics the service exports", (t) => {
  const allowed = sampleNames(ours());
  // Prometheus's own series for a scrape target: "readiness lost" includes a target that is down.
  allowed.add("up");
  // The blackbox exporter's, for the synthetic probe of the public path (docs/observability.md).
  for (const name of BLACKBOX_FAMILIES) allowed.add(name);
  const expressions = [
    ...alertRules().map((r) => ({ where: `rule ${r.alert}`, expr: r.expr })),
    ...dashboardExpressions().map((d) => ({ where: `panel ${d.panel}`, expr: d.expr })),
  ];
  t.true(expressions.length > 50);
  for (const { where, expr } of expressions) {
    const names = metricNames(expr);
    t.true(names.length > 0, `${where} names a metric`);
    for (const n of names) t.true(allowed.has(n), `${where}: ${n} is exported`);
  }
});

test("the dashboard has a panel for every exported family", (t) => {
  const named = new Set(dashboardExpressions().flatMap((d) => metricNames(d.expr)));
  for (const f of ours()) {
    const forms =
      f.type === "histogram" ? [`${f.name}_bucket`, `${f.name}_sum`, `${f.name}_count`] : [f.name];
    t.true(
      forms.some((n) => named.has(n)),
      `a dashboard panel shows ${f.name}`,
    );
  }
});
