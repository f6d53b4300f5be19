// Prometheus metrics (§15). Labels are low-cardinality only: command type, outcome, safe code,
// receiver, state. Never a user id, Contact id, phone, email or fingerprint. Queue, workflow,
// command, inbox, DLQ and alert gauges are read from the SQL status views at scrape time, so every
// replica reports the same numbers. A scrape waits for them at most METRICS_DEADLINE_MS; when the
// database does not answer in time the gauges keep their last values and
// bitrix_sync_metrics_database_up says 0.
import type pg from "pg";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { withDeadline } from "../db/deadline.js";

export const registry = new Registry();

export const commandOutcomes = new Counter({
  name: "bitrix_sync_crm_command_outcomes_total",
  help: "CRM command results by command type, kind (ok, transient, uncertain, permanent, business) and safe code.",
  labelNames: ["command_type", "kind", "code"] as const,
  registers: [registry],
});

export const batchSize = new Histogram({
  name: "bitrix_sync_crm_batch_size",
  help: "Commands per Bitrix24 batch request.",
  buckets: [1, 2, 5, 10, 20, 30, 40, 50],
  registers: [registry],
});

export const webhookOutcomes = new Counter({
  name: "bitrix_sync_webhook_processed_total",
  help: "Processed robot webhooks by receiver and outcome.",
  labelNames: ["receiver", "outcome"] as const,
  registers: [registry],
});

export const webhookRequests = new Counter({
  name: "bitrix_sync_webhook_requests_total",
  help: "Robot webhook requests by receiver and result: accepted, or the safe reason of the refusal (no IP, no token).",
  labelNames: ["receiver", "result"] as const,
  registers: [registry],
});

export const reconciliationRuns = new Counter({
  name: "bitrix_sync_reconciliation_runs_total",
  help: "Contact reconciliation runs by status.",
  labelNames: ["status"] as const,
  registers: [registry],
});

export const reconciliationRecovered = new Counter({
  name: "bitrix_sync_reconciliation_recovered_total",
  help: "Contacts reconciliation brought up to date that no webhook had repaired.",
  registers: [registry],
});

const depth = new Gauge({
  name: "bitrix_sync_queue_depth",
  help: "han_app.sync_queue rows by status.",
  labelNames: ["status"] as const,
  registers: [registry],
});
const oldest = new Gauge({
  name: "bitrix_sync_queue_oldest_age_seconds",
  help: "Age of the oldest han_app.sync_queue row by status.",
  labelNames: ["status"] as const,
  registers: [registry],
});
const workflows = new Gauge({
  name: "bitrix_sync_workflows_active",
  help: "Active workflows by type and state.",
  labelNames: ["workflow_type", "state"] as const,
  registers: [registry],
});
const commands = new Gauge({
  name: "bitrix_sync_crm_commands",
  help: "Unfinished and dead-lettered CRM commands by type and status.",
  labelNames: ["command_type", "status"] as const,
  registers: [registry],
});
const webhooks = new Gauge({
  name: "bitrix_sync_webhook_inbox",
  help: "Unprocessed webhook inbox rows by receiver and status.",
  labelNames: ["receiver", "status"] as const,
  registers: [registry],
});
const webhookLag = new Gauge({
  name: "bitrix_sync_webhook_lag_seconds",
  help: "Age of the oldest unprocessed webhook by receiver.",
  labelNames: ["receiver"] as const,
  registers: [registry],
});
const deadLetters = new Gauge({
  name: "bitrix_sync_dead_letters_open",
  help: "Open technical dead letters by operation and safe code.",
  labelNames: ["operation", "code"] as const,
  registers: [registry],
});
const alertsOpen = new Gauge({
  name: "bitrix_sync_business_alerts_open",
  help: "Open business alerts by type.",
  labelNames: ["alert_type"] as const,
  registers: [registry],
});
const alertsOverdue = new Gauge({
  name: "bitrix_sync_business_alerts_sla_overdue",
  help: "Open business alerts past their SLA, by type.",
  labelNames: ["alert_type"] as const,
  registers: [registry],
});
const mappingViolations = new Gauge({
  name: "bitrix_sync_mapping_invariant_violations",
  help: "Active mappings whose user is not active (should be closed by contact.deactivate).",
  registers: [registry],
});

const databaseUp = new Gauge({
  name: "bitrix_sync_metrics_database_up",
  help: "1 when this scrape read the database gauges in time; 0 when they hold the values of an earlier scrape.",
  registers: [registry],
});

/** A scrape answers within this, with or without fresh database gauges. */
export const METRICS_DEADLINE_MS = 3_000;

/** Refreshes the database gauges within the deadline; never throws. True when they are fresh. */
export async function refreshDatabaseGauges(
  pool: pg.Pool,
  deadlineMs = METRICS_DEADLINE_MS,
): Promise<boolean> {
  try {
    await withDeadline(collectDatabaseGauges(pool), deadlineMs);
    databaseUp.set(1);
    return true;
  } catch {
    databaseUp.set(0);
    return false;
  }
}

/** Reads the status views into the gauges. */
export async function collectDatabaseGauges(pool: pg.Pool): Promise<void> {
  const [q, w, c, h, d, a, m] = await Promise.all([
    pool.query<{ status: string; count: string; oldest_age_sec: string }>(
      "select * from bitrix_sync.status_queue",
    ),
    pool.query<{ workflow_type: string; state: string; count: string }>(
      "select * from bitrix_sync.status_workflows",
    ),
    pool.query<{ command_type: string; status: string; count: string }>(
      "select * from bitrix_sync.status_commands",
    ),
    pool.query<{ receiver: string; status: string; count: string; oldest_age_sec: string }>(
      "select * from bitrix_sync.status_webhooks",
    ),
    pool.query<{ operation: string; error_code: string; count: string }>(
      "select * from bitrix_sync.status_dead_letters",
    ),
    pool.query<{ alert_type: string; open_count: string; sla_overdue: string }>(
      "select * from bitrix_sync.status_alerts",
    ),
    pool.query<{ n: string }>(
      `select count(*) as n from bitrix_sync.entity_external_mapping m
         join han_app.user_identity u on u.id = m.entity_id
        where m.status = 'active' and u.record_status <> 'active'`,
    ),
  ]);
  for (const g of [
    depth,
    oldest,
    workflows,
    commands,
    webhooks,
    webhookLag,
    deadLetters,
    alertsOpen,
    alertsOverdue,
  ])
    g.reset();
  for (const r of q.rows) {
    depth.set({ status: r.status }, Number(r.count));
    oldest.set({ status: r.status }, Number(r.oldest_age_sec));
  }
  for (const r of w.rows) workflows.set({ workflow_type: r.workflow_type, state: r.state }, Number(r.count));
  for (const r of c.rows) commands.set({ command_type: r.command_type, status: r.status }, Number(r.count));
  const lag = new Map<string, number>();
  for (const r of h.rows) {
    webhooks.set({ receiver: r.receiver, status: r.status }, Number(r.count));
    lag.set(r.receiver, Math.max(lag.get(r.receiver) ?? 0, Number(r.oldest_age_sec)));
  }
  for (const [receiver, s] of lag) webhookLag.set({ receiver }, s);
  for (const r of d.rows) deadLetters.inc({ operation: r.operation, code: r.error_code }, Number(r.count));
  for (const r of a.rows) {
    alertsOpen.inc({ alert_type: r.alert_type }, Number(r.open_count));
    alertsOverdue.inc({ alert_type: r.alert_type }, Number(r.sla_overdue));
  }
  mappingViolations.set(Number(m.rows[0]?.n ?? 0));
}
