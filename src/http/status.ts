// §14: readiness matrix, the internal status document and Prometheus metrics. Nothing here returns
// PII, Contact or user IDs, URLs with credentials or raw errors: counts, ages, codes and times only.
import type pg from "pg";
import type { Config } from "../config/env.js";
import type { CrmLimiter } from "../crm/limiter.js";
import { migrationsCurrent } from "../db/migrate.js";
import type { HealthState } from "../observability/health.js";
import type { SettingsCache } from "../settings-cache.js";

/** What the HTTP layer may ask the running service about itself. */
export interface StatusSource {
  config: Config;
  health: HealthState;
  limiter: CrmLimiter;
  /**
   * The settings in use (health.crm_stale_sec: a CRM without a success for this long while
   * failures arrive is "degraded"), their version, and a problem while the active one does not parse.
   */
  settings: Pick<SettingsCache, "get" | "version" | "problem">;
}

/** The sync loop beats every round (at most the poll interval, 5 s); silence this long is a stall. */
export const WORKER_STALL_MS = 90_000;

/** Readiness verdicts, worst last. */
export const READINESS_STATUSES = ["ready", "degraded", "not_ready"] as const;

/** Every problem readiness can name (a fixed code each; /metrics exports each as a gauge). */
export const READINESS_PROBLEMS = [
  "alert_config_invalid",
  "crm_credential_rejected",
  "crm_stale",
  "cutover_not_performed",
  "database_unreachable",
  "migrations_pending",
  "portal_identity_missing",
  "queue_grants_missing",
  "receiver_tokens_missing",
  "settings_unparsable",
  "worker_stalled",
] as const;

export interface Readiness {
  status: (typeof READINESS_STATUSES)[number];
  problems: string[];
}

export async function readiness(pool: pg.Pool, src?: StatusSource): Promise<Readiness> {
  const fatal: string[] = [];
  const degraded: string[] = [];
  try {
    const current = await migrationsCurrent(pool);
    if (!current) fatal.push("migrations_pending");
    const { rows } = await pool.query<{ ok: boolean }>(
      `select has_table_privilege('han_app.sync_queue', 'SELECT')
          and has_column_privilege('han_app.sync_queue', 'status', 'UPDATE')
          and has_column_privilege('han_app.client_profile', 'full_name', 'UPDATE') as ok`,
    );
    if (!rows[0]?.ok) fatal.push("queue_grants_missing");
    // Both are SQL's to decide (sql/cutover.sql, sql/settings.sql); an older schema has neither.
    if (current) {
      const { rows: s } = await pool.query<{ cutover: boolean; alerts: string | null }>(
        "select bitrix_sync.cutover_performed() as cutover, bitrix_sync.alert_config_problem() as alerts",
      );
      // The claim functions return nothing until the cutover: the receivers record, nothing moves.
      // Degraded, not not-ready: a load balancer that took the instance out would make the public
      // receivers unreachable, and the robot does not retry (§10.1). (Sandbox mode performs the
      // cutover at start; this shows when that failed.)
      if (src?.config.processing && !s[0]?.cutover) degraded.push("cutover_not_performed");
      // The alert receiver refuses every event and alerts stay in the database; the rest works.
      if (s[0]?.alerts) degraded.push(s[0].alerts);
    }
  } catch {
    fatal.push("database_unreachable");
  }
  if (src) {
    const now = Date.now();
    const h = src.health;
    if (src.config.processing && now - (h.loopBeatAt ?? h.startedAt) > WORKER_STALL_MS)
      fatal.push("worker_stalled");
    if (h.credentialProblem) fatal.push("crm_credential_rejected");
    // The same refusal inside an answered batch: the transport saw a 200 (reference §1, §3).
    if (h.permissionProblems.size > 0) fatal.push("crm_permission_denied");
    if (!src.config.sandbox) {
      const e = src.config.env;
      if (!e.BITRIX_SYNC_PORTAL_HOST || !e.BITRIX_SYNC_PORTAL_MEMBER_ID)
        fatal.push("portal_identity_missing");
      if (
        !src.config.secrets.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN ||
        !src.config.secrets.BITRIX_SYNC_ALERT_RECEIVER_TOKEN
      ) {
        fatal.push("receiver_tokens_missing");
      }
    }
    const lastOk = h.lastCrmSuccessAt ?? h.startedAt;
    const staleMs = src.settings.get().health.crmStaleSec * 1000;
    if (h.lastCrmFailure && h.lastCrmFailure.at > lastOk && now - lastOk > staleMs)
      degraded.push("crm_stale");
    // The service runs on the previous version: working, but not as the operator asked.
    const settings = src.settings.problem();
    if (settings) degraded.push(settings.code);
  }
  if (fatal.length > 0) return { status: "not_ready", problems: [...fatal, ...degraded] };
  if (degraded.length > 0) return { status: "degraded", problems: degraded };
  return { status: "ready", problems: [] };
}

const iso = (ms: number | null | undefined) =>
  ms === null || ms === undefined ? null : new Date(ms).toISOString();

/** The internal status document (§14). */
export async function statusDocument(pool: pg.Pool, src: StatusSource) {
  const [queue, workflows, commands, webhooks, dlq, alerts, mirror, cursors] = await Promise.all([
    pool.query(
      "select status, count::int, oldest_age_sec::int from bitrix_sync.status_queue order by status",
    ),
    pool.query(
      "select workflow_type, state, count::int, oldest_age_sec::int from bitrix_sync.status_workflows order by 1, 2",
    ),
    pool.query(
      "select command_type, status, count::int, oldest_age_sec::int from bitrix_sync.status_commands order by 1, 2",
    ),
    pool.query(
      "select receiver, status, count::int, oldest_age_sec::int from bitrix_sync.status_webhooks order by 1, 2",
    ),
    pool.query(
      "select source, operation, error_code, count::int, oldest_age_sec::int from bitrix_sync.status_dead_letters order by 1, 2, 3",
    ),
    pool.query(
      "select alert_type, severity, open_count::int, sla_overdue::int from bitrix_sync.status_alerts order by 1, 2",
    ),
    pool.query(
      "select mirror_status, count::int, oldest_age_sec::int from bitrix_sync.status_alert_mirror order by 1",
    ),
    pool.query(
      "select job_type, watermark, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered from bitrix_sync.reconciliation_cursors order by job_type",
    ),
  ]);
  let limiter: unknown = null;
  try {
    const l = await src.limiter.state();
    limiter = {
      tokens: l.tokens,
      rate: l.rate,
      rate_factor: l.rateFactor,
      in_flight: l.inFlight,
      throttled_until: iso(l.throttledUntil),
      blocked_methods: l.blockedMethods.map((b) => ({ method: b.method, until: iso(b.until) })),
    };
  } catch {
    limiter = { error: "unavailable" };
  }
  const h = src.health;
  return {
    mode: src.config.env.BITRIX_SYNC_MODE,
    sandbox: src.config.sandbox,
    processing: src.config.processing,
    settings_version: src.settings.version(),
    settings_refused_version: src.settings.problem()?.version ?? null,
    readiness: await readiness(pool, src),
    queue: queue.rows,
    workflows: workflows.rows,
    commands: commands.rows,
    webhooks: webhooks.rows,
    dead_letters: dlq.rows,
    business_alerts: alerts.rows,
    alert_mirror: mirror.rows,
    reconciliation: cursors.rows,
    limiter,
    crm: {
      last_success_at: iso(h.lastCrmSuccessAt),
      last_failure: h.lastCrmFailure ? { code: h.lastCrmFailure.code, at: iso(h.lastCrmFailure.at) } : null,
      credential_problem: h.credentialProblem
        ? { code: h.credentialProblem.code, at: iso(h.credentialProblem.at) }
        : null,
      permission_problems: [...h.permissionProblems]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([method, p]) => ({ method, code: p.code, at: iso(p.at) })),
    },
    worker: { last_heartbeat_at: iso(h.loopBeatAt) },
  };
}
