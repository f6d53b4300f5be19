// What GET /metrics reads when it is scraped (§14, §15): the database's samples in one call of
// bitrix_sync.metrics_snapshot() (sql/metrics.sql), readiness with its problems, and the process's
// heartbeat and CRM health. Both reads share a deadline, so a slow database makes a scrape report
// bitrix_sync_metrics_database_up 0 instead of hanging; no database-derived number is ever left
// over from an earlier scrape. Concurrent scrapes share one collection.
import type pg from "pg";
import { Counter, Gauge } from "prom-client";
import { CITIZENSHIP_DICTIONARY_STATES } from "../crm/contact-fields.js";
import { withDeadline } from "../db/deadline.js";
import { releaseSchema } from "../db/schema-window.js";
import { registry, safeLabel } from "../observability/metrics.js";
import { READINESS_PROBLEMS, READINESS_STATUSES } from "./api.js";
import { type InboxProbe, type Readiness, readiness, type StatusSource } from "./status.js";

/** Longest a scrape waits for the database (snapshot and readiness each). */
export const SCRAPE_DEADLINE_MS = 2_000;
/** The mapping invariant needs a pass over the active mappings: at most this often. */
const MAPPING_CHECK_INTERVAL_MS = 60_000;

type Kind = "gauge" | "counter";
interface Family {
  name: string;
  kind: Kind;
  help: string;
  labels: readonly string[];
}

/** Every family metrics_snapshot() returns, in the order docs/observability.md lists them. */
const DATABASE_FAMILIES: readonly Family[] = [
  f(
    "bitrix_sync_queue_depth",
    "gauge",
    "han_app.sync_queue intents in a live status (pending, leased, retry_wait); pending includes the App's intents not folded from the journal yet.",
    ["status"],
  ),
  f(
    "bitrix_sync_queue_oldest_age_seconds",
    "gauge",
    "Age of the oldest intent in each live status (0 when there is none).",
    ["status"],
  ),
  f("bitrix_sync_workflows_active", "gauge", "Unfinished workflows by type and state.", [
    "workflow_type",
    "state",
  ]),
  f(
    "bitrix_sync_workflows_oldest_age_seconds",
    "gauge",
    "Age of the oldest unfinished workflow by type and state.",
    ["workflow_type", "state"],
  ),
  f(
    "bitrix_sync_workflow_transitions_total",
    "counter",
    "Committed workflow state transitions by type, from and to.",
    ["workflow_type", "from", "to"],
  ),
  f("bitrix_sync_crm_commands", "gauge", "Unfinished CRM commands by type and live status.", [
    "command_type",
    "status",
  ]),
  f(
    "bitrix_sync_crm_commands_oldest_age_seconds",
    "gauge",
    "Age of the oldest unfinished CRM command by type and status.",
    ["command_type", "status"],
  ),
  f(
    "bitrix_sync_command_transitions_total",
    "counter",
    "Committed CRM command status transitions by type, from and to.",
    ["command_type", "from", "to"],
  ),
  f("bitrix_sync_webhook_inbox", "gauge", "Webhook inbox events not processed yet, by receiver and status.", [
    "receiver",
    "status",
  ]),
  f(
    "bitrix_sync_webhook_inbox_oldest_age_seconds",
    "gauge",
    "Age of the oldest unprocessed inbox event by receiver and status.",
    ["receiver", "status"],
  ),
  f(
    "bitrix_sync_webhook_coalesced_total",
    "counter",
    "Inbox events covered by another event's read of the same entity, by receiver.",
    ["receiver"],
  ),
  f(
    "bitrix_sync_dead_letters_open",
    "gauge",
    "Open technical dead letters by source, operation and safe code.",
    ["source", "operation", "code"],
  ),
  f(
    "bitrix_sync_dead_letters_oldest_age_seconds",
    "gauge",
    "Age of the oldest open technical dead letter by source.",
    ["source"],
  ),
  f("bitrix_sync_dead_letters_total", "counter", "Technical dead letters written, by source.", ["source"]),
  f("bitrix_sync_business_alerts_open", "gauge", "Open business alerts by type and severity.", [
    "alert_type",
    "severity",
  ]),
  f(
    "bitrix_sync_business_alerts_sla_overdue",
    "gauge",
    "Open business alerts past alerts.sla_hours, by type and severity.",
    ["alert_type", "severity"],
  ),
  f(
    "bitrix_sync_business_alerts_unmirrored",
    "gauge",
    "Business alerts whose smart-process item is behind, by mirror status: pending (not sent yet) or failed (could not be mirrored).",
    ["mirror_status"],
  ),
  f(
    "bitrix_sync_phone_links_held",
    "gauge",
    "Active links made by phone alone whose CRM-master fields are held back (mapping.hold_after_phone_link) until a robot webhook or an admin confirms.",
    [],
  ),
  f(
    "bitrix_sync_phone_links_held_oldest_age_seconds",
    "gauge",
    "Age of the oldest held link made by phone alone (0 when there is none).",
    [],
  ),
  f(
    "bitrix_sync_business_alerts_unmirrored_oldest_age_seconds",
    "gauge",
    "How long the oldest alert whose smart-process item is behind has waited, since its last change or, without an item, since it was raised; by mirror status (0 when none).",
    ["mirror_status"],
  ),
  f(
    "bitrix_sync_business_alerts_mirror_enabled",
    "gauge",
    "1 when business alerts go to the smart process, 0 when alerts.database_only keeps them in the database.",
    [],
  ),
  f(
    "bitrix_sync_business_alerts_remote_missing_total",
    "counter",
    "Open business alerts whose smart-process item was found deleted in the CRM (remote_missing, §10.3).",
    [],
  ),
  f(
    "bitrix_sync_mapping_invariant_violations",
    "gauge",
    "Active mappings whose App user is not active (contact.deactivate should have closed them); checked at most once a minute.",
    [],
  ),
  f(
    "bitrix_sync_reconciliation_cursor_lag_seconds",
    "gauge",
    "How far a reconciliation cursor's watermark trails now (from the cutover while no run has succeeded), by job type.",
    ["job_type"],
  ),
  f(
    "bitrix_sync_reconciliation_failed_runs",
    "gauge",
    "Reconciliation runs that failed since the last successful one, by job type (0 after a success).",
    ["job_type"],
  ),
  f(
    "bitrix_sync_reconciliation_interval_seconds",
    "gauge",
    "The configured interval between reconciliation runs, by job type (reconcile.contacts_interval_sec, alerts.reconcile_interval_sec).",
    ["job_type"],
  ),
  f(
    "bitrix_sync_reconciliation_recovered_spike_timestamp_seconds",
    "gauge",
    "When the last Contact reconciliation run found a spike of Contacts recovered without a webhook (reconcile.recovered_spike_threshold and _ratio; Unix time, 0 before the first): webhooks may be lost.",
    [],
  ),
  f("bitrix_sync_limiter_tokens", "gauge", "Tokens in the shared CRM token bucket now.", []),
  f(
    "bitrix_sync_limiter_rate_factor",
    "gauge",
    "Share of limiter.refill_per_sec in force (cut after a limit refusal, climbs back to 1).",
    [],
  ),
  f(
    "bitrix_sync_limiter_throttled_seconds",
    "gauge",
    "Seconds left of the cool-down after a limit refusal (0: none).",
    [],
  ),
  f("bitrix_sync_limiter_in_flight", "gauge", "CRM HTTP requests in flight, all replicas together.", []),
  f(
    "bitrix_sync_limiter_blocked_methods",
    "gauge",
    "REST methods blocked by OPERATION_TIME_LIMIT right now.",
    [],
  ),
  f(
    "bitrix_sync_drift_users",
    "gauge",
    "Users (or Contacts without a user) the convergence audit found silently out of step, by kind; status_drift lists them.",
    ["kind"],
  ),
  f(
    "bitrix_sync_audit_last_success_timestamp_seconds",
    "gauge",
    "When the last convergence audit run succeeded (Unix time; when the audit was installed, before the first).",
    [],
  ),
  f("bitrix_sync_audit_running", "gauge", "1 while a convergence audit run holds the audit.", []),
  f(
    "bitrix_sync_audit_enabled",
    "gauge",
    "1 when the crontab's convergence audit runs (audit.enabled, after the cutover), 0 when it is off.",
    [],
  ),
  f(
    "bitrix_sync_audit_interval_seconds",
    "gauge",
    "audit.interval_sec: a sampled run is due this often.",
    [],
  ),
  f("bitrix_sync_audit_links", "gauge", "Active links of active users when the last audit run finished.", []),
  f(
    "bitrix_sync_audit_overdue_links",
    "gauge",
    "Of those, the links not compared with their Contact within audit.period_days.",
    [],
  ),
  f(
    "bitrix_sync_audit_progress_ratio",
    "gauge",
    "Share of the active links compared within audit.period_days, as of the last audit run (1: all).",
    [],
  ),
];

function f(name: string, kind: Kind, help: string, labels: readonly string[]): Family {
  return { name, kind, help, labels };
}

const dbMetrics = new Map<string, Gauge<string> | Counter<string>>(
  DATABASE_FAMILIES.map((d) => {
    const config = { name: d.name, help: d.help, labelNames: d.labels, registers: [registry] };
    return [d.name, d.kind === "counter" ? new Counter(config) : new Gauge(config)];
  }),
);

const UNLABELLED = new Set(DATABASE_FAMILIES.filter((d) => d.labels.length === 0).map((d) => d.name));

const databaseUp = new Gauge({
  name: "bitrix_sync_metrics_database_up",
  help: "1 when this scrape read the database's samples within the deadline; 0 when it could not (the database-derived families are then absent).",
  registers: [registry],
});
const readinessGauge = new Gauge({
  name: "bitrix_sync_readiness",
  help: "Readiness as GET /health/ready reports it: 1 for the current status (ready, degraded, not_ready), 0 for the others.",
  labelNames: ["status"] as const,
  registers: [registry],
});
const problemGauge = new Gauge({
  name: "bitrix_sync_readiness_problem",
  help: "1 for each problem readiness names right now (docs/operations.md lists them), 0 for the others.",
  labelNames: ["problem"] as const,
  registers: [registry],
});
const heartbeat = new Gauge({
  name: "bitrix_sync_worker_heartbeat_timestamp_seconds",
  help: "When the sync loop last started a round (Unix time; the process start until the first round).",
  registers: [registry],
});
const processing = new Gauge({
  name: "bitrix_sync_processing_enabled",
  help: "1 when this process claims work (BITRIX_SYNC_ENABLED=true), 0 when it only records webhooks.",
  registers: [registry],
});
const crmLastSuccess = new Gauge({
  name: "bitrix_sync_crm_last_success_timestamp_seconds",
  help: "When the portal last answered a request with success (Unix time); absent before the first.",
  registers: [registry],
});

/** A schema number as a label: six digits, else `unknown` (labels carry nothing else). */
const schemaLabel = (v: string | null | undefined) => (v && /^\d{6}$/.test(v) ? v : "unknown");
const schemaGauge = new Gauge({
  name: "bitrix_sync_schema_info",
  help: "Always 1; the labels name the database's schema (its newest applied migration, as readiness last read it; unknown before the first read) and release_schema, this release's own newest migration (docs/operations.md, \"The compatibility window\").",
  labelNames: ["schema", "release_schema"] as const,
  registers: [registry],
});

const dictionaryState = new Gauge({
  name: "bitrix_sync_citizenship_dictionary_state",
  help: "The citizenship dictionary after its last read: 1 for the current state (unknown, ready, list_empty, field_missing, unavailable), 0 for the others.",
  labelNames: ["state"] as const,
  registers: [registry],
});
const dictionaryItems = new Gauge({
  name: "bitrix_sync_citizenship_dictionary_items",
  help: "Elements in the cached citizenship list (0 when the field is missing, the list is empty or nothing was read).",
  registers: [registry],
});

/** What a scrape reads: the pool, and the running service's state when there is one. */
export interface ScrapeSource {
  pool: pg.Pool;
  status?: StatusSource;
  /** The receivers' write path (InboxWriter.probe), as readiness exercises it. */
  probe?: InboxProbe;
}

interface Row {
  family: string;
  labels: Record<string, unknown>;
  value: number;
}

const MAPPING_FAMILY = "bitrix_sync_mapping_invariant_violations";
let lastMappingCheck = 0;
let inflight: Promise<void> | null = null;

/** Brings every scrape-time family up to date; concurrent callers share one collection. */
export function collectScrape(src: ScrapeSource): Promise<void> {
  inflight ??= collect(src).finally(() => {
    inflight = null;
  });
  return inflight;
}

async function collect(src: ScrapeSource): Promise<void> {
  const checkMappings = Date.now() - lastMappingCheck >= MAPPING_CHECK_INTERVAL_MS;
  const [rows, ready] = await Promise.all([
    withDeadline(
      readSnapshot(src.pool, src.status?.limiter.bucket ?? null, checkMappings),
      SCRAPE_DEADLINE_MS,
    ).catch(() => null),
    withDeadline(readiness(src.pool, src.status, src.probe), SCRAPE_DEADLINE_MS).catch(() => null),
  ]);
  // Everything below is synchronous: a concurrent registry read sees all old or all new values.
  setDatabase(rows, checkMappings);
  setReadiness(ready);
  setProcess(src.status);
}

async function readSnapshot(pool: pg.Pool, bucket: string | null, checkMappings: boolean): Promise<Row[]> {
  const client = await pool.connect();
  try {
    // One simple-protocol string: SET LOCAL holds for this implicit transaction only, so the
    // server cancels the snapshot at the deadline and the connection goes back clean.
    const bucketLiteral = bucket === null ? "null" : client.escapeLiteral(bucket);
    const results = (await client.query(
      `set local statement_timeout = ${SCRAPE_DEADLINE_MS};
       select family, labels, value from bitrix_sync.metrics_snapshot(${bucketLiteral}, ${checkMappings})`,
    )) as unknown as pg.QueryResult<Row>[];
    return results[1]?.rows ?? [];
  } finally {
    client.release();
  }
}

function setDatabase(rows: Row[] | null, checkMappings: boolean): void {
  for (const [name, m] of dbMetrics) {
    // The mapping gauge keeps its value between checks, unless the database could not be read.
    if (name !== MAPPING_FAMILY || checkMappings || rows === null) clear(m, UNLABELLED.has(name));
  }
  if (rows === null) {
    databaseUp.set(0);
    lastMappingCheck = 0;
    return;
  }
  databaseUp.set(1);
  if (checkMappings) lastMappingCheck = Date.now();
  for (const r of rows) {
    const metric = dbMetrics.get(r.family);
    if (!metric) continue;
    const labels: Record<string, string> = {};
    for (const name of DATABASE_FAMILIES.find((d) => d.name === r.family)?.labels ?? []) {
      labels[name] = safeLabel(r.labels[name]);
    }
    if (metric instanceof Counter) metric.inc(labels, Math.max(0, r.value));
    else metric.set(labels, r.value);
  }
}

function setReadiness(r: Readiness | null): void {
  // A readiness that could not be decided in time is not ready.
  const status = r?.status ?? "not_ready";
  for (const s of READINESS_STATUSES) readinessGauge.set({ status: s }, s === status ? 1 : 0);
  problemGauge.reset();
  for (const p of READINESS_PROBLEMS) problemGauge.set({ problem: p }, 0);
  for (const p of r?.problems ?? ["database_unreachable"]) problemGauge.set({ problem: safeLabel(p) }, 1);
}

function setProcess(status: StatusSource | undefined): void {
  clear(heartbeat, true);
  clear(processing, true);
  clear(crmLastSuccess, true);
  clear(dictionaryState, false);
  clear(dictionaryItems, true);
  schemaGauge.reset();
  schemaGauge.set(
    {
      schema: schemaLabel(status?.health.schema?.database),
      release_schema: schemaLabel(releaseSchema().number),
    },
    1,
  );
  if (!status) return;
  const h = status.health;
  for (const s of CITIZENSHIP_DICTIONARY_STATES)
    dictionaryState.set({ state: s }, s === h.citizenship.state ? 1 : 0);
  dictionaryItems.set(h.citizenship.items);
  heartbeat.set((h.loopBeatAt ?? h.startedAt) / 1000);
  processing.set(status.config.processing ? 1 : 0);
  if (h.lastCrmSuccessAt !== null) crmLastSuccess.set(h.lastCrmSuccessAt / 1000);
}

/** No sample at all: prom-client keeps a 0 for a family without labels unless it is removed. */
function clear(m: Gauge<string> | Counter<string>, unlabelled: boolean): void {
  m.reset();
  if (unlabelled) m.remove();
}
