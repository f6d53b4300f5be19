// Prometheus metrics (§15), prefixed bitrix_sync_. Labels are low-cardinality only: lane, command
// and workflow type, state, outcome, safe code, receiver, reason, source. Never a user ID, Contact
// ID, phone, e-mail or fingerprint; `safeLabel` is the last line of defence for values that come
// from elsewhere. This file holds what the process counts as things happen; what the database and
// the process state say is read at scrape time (scrape.ts). docs/observability.md lists every family.
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { RECEIVERS } from "../config/receivers.js";
import { SERVICE_REVISION, SERVICE_VERSION } from "../version.js";

export const registry = new Registry();

const SAFE_LABEL = /^[a-z][a-z0-9_.]{0,63}$/;

/** The value itself when it is a safe code (lower-case word, at most 64 characters), else "other". */
export function safeLabel(value: unknown): string {
  return typeof value === "string" && SAFE_LABEL.test(value) ? value : "other";
}

/** The build this process runs (src/version.ts): join it onto any series with `on (instance)`. */
export const buildInfo = new Gauge({
  name: "bitrix_sync_build_info",
  help: "Always 1; the labels name the build this process runs: version (BITRIX_SYNC_VERSION, else package.json's) and revision (the commit: BITRIX_SYNC_REVISION, else the checkout's HEAD, else unknown).",
  labelNames: ["version", "revision"] as const,
  registers: [registry],
});
buildInfo.set({ version: SERVICE_VERSION, revision: SERVICE_REVISION }, 1);

const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const LAG_BUCKETS = [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600];

/** The sync loop's lanes (src/sync-loop.ts), as the claim and retry metrics name them. */
export type Lane = "intake" | "workflows" | "pump" | "webhooks";

const claimDuration = new Histogram({
  name: "bitrix_sync_claim_duration_seconds",
  help: "Time one claim call of a lane takes in PostgreSQL (claim_sync_tasks, claim_workflows, claim_commands, claim_webhooks).",
  labelNames: ["lane"] as const,
  buckets: SECONDS_BUCKETS,
  registers: [registry],
});

/** Times `claim` as one claim of `lane`. */
export async function timedClaim<T>(lane: Lane, claim: () => Promise<T>): Promise<T> {
  const end = claimDuration.startTimer({ lane });
  try {
    return await claim();
  } finally {
    end();
  }
}

export const retries = new Counter({
  name: "bitrix_sync_retries_total",
  help: "Retries scheduled, by lane and the safe code of the failure (a retry past the horizon is a dead letter instead, not counted here).",
  labelNames: ["lane", "code"] as const,
  registers: [registry],
});

/** Counts one retry the database accepted as a retry (not turned into a dead letter). */
export function countRetry(lane: Lane, code: unknown): void {
  retries.inc({ lane, code: safeLabel(code) });
}

export const stepGroups = new Counter({
  name: "bitrix_sync_step_groups_total",
  help: "Groups of workflow steps run in one transaction, by outcome: committed, or alone (the group failed and was rolled back, and its steps ran again one by one).",
  labelNames: ["outcome"] as const,
  registers: [registry],
});

export const commandOutcomes = new Counter({
  name: "bitrix_sync_crm_command_outcomes_total",
  help: "Results of CRM sub-commands (one per batch entry) by command type, kind (ok, transient, uncertain, permanent, business) and safe code.",
  labelNames: ["command_type", "kind", "code"] as const,
  registers: [registry],
});

export const batchSize = new Histogram({
  name: "bitrix_sync_crm_batch_size",
  help: "Sub-commands per Bitrix24 batch request.",
  buckets: [1, 2, 5, 10, 20, 30, 40, 50],
  registers: [registry],
});

export const directCommands = new Counter({
  name: "bitrix_sync_crm_direct_commands_total",
  help: "CRM commands sent as a call of their own instead of inside a batch, by command type: a parameter held text the portal would read as a batch reference ($result[...] and the like).",
  labelNames: ["command_type"] as const,
  registers: [registry],
});

export const batchDuration = new Histogram({
  name: "bitrix_sync_crm_batch_duration_seconds",
  help: "Time of one Bitrix24 batch HTTP request, by outcome: batch (a batch reply), http_<status>, network or malformed_reply.",
  labelNames: ["outcome"] as const,
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
  registers: [registry],
});

/** The classifier codes that mean the portal refused for its limits (§8, §9). */
export const RATE_LIMIT_CODES = [
  "operation_time_limit",
  "overload_limit",
  "query_limit_exceeded",
  "rate_limited",
] as const;

export const rateLimited = new Counter({
  name: "bitrix_sync_crm_rate_limited_total",
  help: "Limit refusals from the portal by safe code: a whole request refused counts once, a refused sub-command once each.",
  labelNames: ["code"] as const,
  registers: [registry],
});
for (const code of RATE_LIMIT_CODES) rateLimited.inc({ code }, 0);

export const limiterWait = new Histogram({
  name: "bitrix_sync_limiter_wait_seconds",
  help: "Time spent waiting for a limiter permit (a token and an in-flight slot), by outcome: granted, aborted (the caller gave up) or failed (a database error).",
  labelNames: ["outcome"] as const,
  buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
  registers: [registry],
});

export const webhookAccepted = new Counter({
  name: "bitrix_sync_webhook_accepted_total",
  help: "Robot webhook requests recorded in the inbox, by receiver.",
  labelNames: ["receiver"] as const,
  registers: [registry],
});
for (const receiver of RECEIVERS) webhookAccepted.inc({ receiver }, 0);

export const webhookRejected = new Counter({
  name: "bitrix_sync_webhook_rejected_total",
  help: "Robot webhook requests refused, by receiver and safe reason (docs/receivers.md): the receivers' own refusals, and the public nginx's (source_ip, method_not_allowed, not_found, body_too_large, rate_limited; receiver none for a path that is not a receiver), which nginx hands to the service (src/inbound/edge.ts).",
  labelNames: ["receiver", "reason"] as const,
  registers: [registry],
});
// Present from the start (0 before the first), so a rule's increase() sees the first refusal by
// address; "none" is any other path, where the synthetic probe is refused (docs/observability.md).
for (const receiver of [...RECEIVERS, "none"]) webhookRejected.inc({ receiver, reason: "source_ip" }, 0);

export const webhookOutcomes = new Counter({
  name: "bitrix_sync_webhook_processed_total",
  help: "Processed robot webhooks by receiver and outcome.",
  labelNames: ["receiver", "outcome"] as const,
  registers: [registry],
});

export const webhookApplyLag = new Histogram({
  name: "bitrix_sync_webhook_apply_lag_seconds",
  help: "From the receipt of a robot webhook to its processing being committed (the oldest event of a coalesced group), by receiver.",
  labelNames: ["receiver"] as const,
  buckets: LAG_BUCKETS,
  registers: [registry],
});

export const reconciliationRuns = new Counter({
  name: "bitrix_sync_reconciliation_runs_total",
  help: "Contact reconciliation runs by status (succeeded, failed).",
  labelNames: ["status"] as const,
  registers: [registry],
});
for (const status of ["succeeded", "failed"]) reconciliationRuns.inc({ status }, 0);

export const reconciliationScanned = new Counter({
  name: "bitrix_sync_reconciliation_scanned_total",
  help: "Changed Contacts the Contact reconciliation found in the CRM (crm.item.list since the watermark).",
  registers: [registry],
});

export const reconciliationUpdated = new Counter({
  name: "bitrix_sync_reconciliation_updated_total",
  help: "Contacts whose CRM-master values the reconciliation wrote into the App.",
  registers: [registry],
});

export const reconciliationRecovered = new Counter({
  name: "bitrix_sync_reconciliation_recovered_total",
  help: "Contacts reconciliation brought up to date that no webhook had repaired.",
  registers: [registry],
});

export const retentionDeleted = new Counter({
  name: "bitrix_sync_retention_deleted_total",
  help: "Finished rows deleted by retention, by table (webhooks, commands, workflows, queue).",
  labelNames: ["table"] as const,
  registers: [registry],
});

export const dictionaryReads = new Counter({
  name: "bitrix_sync_citizenship_dictionary_reads_total",
  help: "Reads of the citizenship list (crm.contact.userfield.list), by outcome: ready, list_empty, field_missing (each cached for citizenship.cache_ttl_sec) or failed (retried after 30 s, doubling up to the TTL).",
  labelNames: ["outcome"] as const,
  registers: [registry],
});

export const auditRuns = new Counter({
  name: "bitrix_sync_audit_runs_total",
  help: "Convergence audit runs by mode (sample, all) and status (succeeded, failed).",
  labelNames: ["mode", "status"] as const,
  registers: [registry],
});
for (const mode of ["sample", "all"])
  for (const status of ["succeeded", "failed"]) auditRuns.inc({ mode, status }, 0);

export const auditRequests = new Counter({
  name: "bitrix_sync_audit_requests_total",
  help: "HTTP requests the convergence audit sent to the portal (spare budget only, at most audit.budget_share of the rate).",
  registers: [registry],
});

export const auditContactsRead = new Counter({
  name: "bitrix_sync_audit_contacts_read_total",
  help: "Contacts the convergence audit read by ID.",
  registers: [registry],
});

/** The event loop's delay is summarised over windows of this length (a minute, as a soak samples). */
export const EVENT_LOOP_WINDOW_MS = 60_000;

// Sampled by Node itself every 20 ms; each window's figures are kept and the histogram starts again,
// so any number of scrapers read the same last full window (the current one until the first ends).
const loopDelay = monitorEventLoopDelay({ resolution: 20 });
loopDelay.enable();
let loopWindow: { p50: number; p99: number; max: number } | null = null;
const loopTimer = setInterval(() => {
  loopWindow = loopSummary();
  loopDelay.reset();
}, EVENT_LOOP_WINDOW_MS);
loopTimer.unref();

function loopSummary() {
  // Nanoseconds; a histogram without a sample answers NaN or huge values: read as 0 then.
  const s = (ns: number) => (Number.isFinite(ns) && loopDelay.count > 0 ? ns / 1e9 : 0);
  return { p50: s(loopDelay.percentile(50)), p99: s(loopDelay.percentile(99)), max: s(loopDelay.max) };
}

export const eventLoopDelay = new Gauge({
  name: "bitrix_sync_event_loop_delay_seconds",
  help: "The process's event-loop delay over the last full minute (the current one until the first ends), by stat: p50, p99, max.",
  labelNames: ["stat"] as const,
  registers: [registry],
  collect() {
    const w = loopWindow ?? loopSummary();
    this.set({ stat: "p50" }, w.p50);
    this.set({ stat: "p99" }, w.p99);
    this.set({ stat: "max" }, w.max);
  },
});
