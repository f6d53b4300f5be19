// §14: readiness matrix, the internal status document and Prometheus metrics. Nothing here returns
// PII, Contact or user IDs, URLs with credentials or raw errors: counts, ages, codes and times only.
//
// Every answer has a deadline (docs/operations.md, "Bounded waits"): what the database does not
// tell in time is reported as a problem code, next to what the process knows by itself.
import type pg from "pg";
import type { z } from "zod";
import { appTableHooks, unknownHooks } from "../app-tables.js";
import type { Config } from "../config/env.js";
import type { CrmLimiter } from "../crm/limiter.js";
import { databaseProblem, isTimeout, withDeadline } from "../db/deadline.js";
import { readSchemaHead, type SchemaState, schemaInfo, windowVerdict } from "../db/schema-window.js";
import type { HealthState } from "../health/state.js";
import { InboxProbeRefused } from "../inbound/inbox.js";
import type { SettingsCache } from "../settings-cache.js";
import { BUILD } from "../version.js";
import type {
  LimiterStatus,
  READINESS_PROBLEMS,
  ReadinessBody,
  StatusBody,
  StatusUnavailableBody,
} from "./api.js";

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
  /** How often readiness looks at the App's tables again (APP_TABLES_CHECK_MS unless given). */
  appTablesCheckMs?: number;
}
/** The sync loop beats every round (at most the poll interval, 5 s); silence this long is a stall. */
export const WORKER_STALL_MS = 90_000;

/** Readiness answers within this, whatever the database does. */
const READINESS_DEADLINE_MS = 2_500;
/**
 * How long one readiness answer is served again. Load balancers, orchestrators and monitors probe
 * readiness, often several of them every second or two; each probe costs a few queries and a test
 * insert, so a burst of probes (or a probe storm while the database struggles) must not turn into
 * as many rounds of queries. Concurrent probes share the round in flight.
 */
export const READINESS_CACHE_MS = 1_000;

/** `compute` at most once per `ttlMs` after its last answer; callers during a round share it. */
export function cachedReadiness(
  compute: () => Promise<Readiness>,
  ttlMs: number = READINESS_CACHE_MS,
): () => Promise<Readiness> {
  let last: { at: number; value: Readiness } | null = null;
  let inFlight: Promise<Readiness> | null = null;
  return () => {
    if (last && Date.now() - last.at < ttlMs) return Promise.resolve(last.value);
    inFlight ??= compute()
      .then((value) => {
        last = { at: Date.now(), value };
        return value;
      })
      .finally(() => {
        inFlight = null;
      });
    return inFlight;
  };
}

/**
 * How often readiness looks at what runs on the App's tables (bitrix_sync.app_table_hooks(): a few
 * catalogue reads). In between it answers what it found last; a probe never waits for the look.
 */
export const APP_TABLES_CHECK_MS = 60_000;

interface AppTablesWatch {
  at: number;
  unknown: boolean;
  inFlight: Promise<void> | null;
}
const appTablesWatches = new WeakMap<pg.Pool, AppTablesWatch>();

/**
 * Whether something the operator does not know of runs on the App's tables (docs/security.md, "The
 * App's tables"), as last seen; starts a look in the background when the last one is older than
 * APP_TABLES_CHECK_MS. The first probe of a process waits for the first look. A failed look keeps
 * the last answer: the database checks report a database that does not answer.
 */
async function appTablesChanged(
  pool: pg.Pool,
  allowed: readonly string[],
  everyMs: number = APP_TABLES_CHECK_MS,
): Promise<boolean> {
  let w = appTablesWatches.get(pool);
  const look = (watch: AppTablesWatch) =>
    appTableHooks(pool)
      .then((rows) => {
        watch.unknown = unknownHooks(rows, allowed).length > 0;
        watch.at = Date.now();
      })
      .catch(() => undefined)
      .finally(() => {
        watch.inFlight = null;
      });
  if (!w) {
    w = { at: 0, unknown: false, inFlight: null };
    appTablesWatches.set(pool, w);
    w.inFlight = look(w);
    await w.inFlight;
    return w.unknown;
  }
  if (!w.inFlight && Date.now() - w.at >= everyMs) w.inFlight = look(w);
  return w.unknown;
}

/** The status document's database part; past it the answer is 503 with what the process knows. */
const STATUS_DEADLINE_MS = 4_000;

/** The readiness answer; its schema is ReadinessBody (src/http/api.ts, docs/openapi.json). */
export type Readiness = z.infer<typeof ReadinessBody>;
export type ReadinessProblem = (typeof READINESS_PROBLEMS)[number];

/** The write path of the receivers, exercised without keeping anything (InboxWriter.probe). */
export type InboxProbe = () => Promise<void>;

/** What the database says about the deployment, beside the problems it shows. */
interface DatabaseChecks {
  fatal: ReadinessProblem[];
  degraded: ReadinessProblem[];
  /** When the portal last answered any replica (epoch ms; sql/limiter/health.sql); null: unknown. */
  crmAnsweredAt: number | null;
}

async function databaseChecks(pool: pg.Pool, src?: StatusSource): Promise<DatabaseChecks> {
  const fatal: ReadinessProblem[] = [];
  const degraded: ReadinessProblem[] = [];
  let crmAnsweredAt: number | null = null;
  // The compatibility window (src/db/schema-window.ts): this release's own newest migration applied
  // (else migrations_pending), and no contract step past its schema (schema_outside_window, below).
  const head = await readSchemaHead(pool);
  const current = head.ownApplied;
  if (!current) fatal.push("migrations_pending");
  let schema: SchemaState = { ...head, floor: null, floorStep: null };
  // The profile's CRM-master columns are written by _write_app_crm_master as the App writer: the
  // runtime needs EXECUTE on it, the writer its UPDATE (migration 000040; before it, the runtime's own).
  const { rows } = await pool.query<{ ok: boolean }>(
    `select has_table_privilege('han_app.sync_queue', 'SELECT')
        and has_column_privilege('han_app.sync_queue', 'status', 'UPDATE')
        and case when to_regprocedure('bitrix_sync._write_app_crm_master(uuid,text,text,text,timestamptz)') is null
                 then has_column_privilege('han_app.client_profile', 'full_name', 'UPDATE')
                 else has_function_privilege('bitrix_sync._write_app_crm_master(uuid,text,text,text,timestamptz)', 'EXECUTE')
                      and has_column_privilege('bitrix_sync_app_writer', 'han_app.client_profile', 'full_name', 'UPDATE')
            end as ok`,
  );
  if (!rows[0]?.ok) fatal.push("queue_grants_missing");
  // Both are SQL's to decide (sql/cutover.sql, sql/settings.sql); an older schema has neither.
  if (current) {
    // alert_config_problem() answers alert_config_invalid or null (sql/settings/validate.sql);
    // crm_contract_problem() crm_contract_unconfirmed or null (sql/contract/probes.sql); the pause
    // (sql/pause/gate.sql) and the portal's last answer to any replica (sql/limiter/health.sql) are the
    // deployment's, read in the same round trip.
    const { rows: s } = await pool.query<{
      cutover: boolean;
      alerts: "alert_config_invalid" | null;
      contract: "crm_contract_unconfirmed" | null;
      paused: boolean;
      answered: Date | null;
      floor: string | null;
      floor_step: string | null;
    }>(
      `select bitrix_sync.cutover_performed() as cutover, bitrix_sync.alert_config_problem() as alerts,
              case when $1::text is null then null else bitrix_sync.crm_contract_problem($1) end as contract,
              bitrix_sync.sync_paused() as paused, bitrix_sync.crm_last_answered_at($2) as answered,
              w.contract_floor as floor, w.contract_step as floor_step
         from (select 1) one left join bitrix_sync.status_schema w on true`,
      [contractHost(src), src?.limiter.bucket ?? null],
    );
    // A contract step past this release's schema (a newer release's migration dropped or narrowed
    // what this one uses): it must leave the rotation; its start would be refused (exit 76).
    schema = { ...schema, floor: s[0]?.floor ?? null, floorStep: s[0]?.floor_step ?? null };
    if (windowVerdict(schema) === "contracted") fatal.push("schema_outside_window");
    // The claim functions return nothing until the cutover: the receivers record, nothing moves.
    // Degraded, not not-ready: a load balancer that took the instance out would make the public
    // receivers unreachable, and the robot does not retry (§10.1). (Sandbox mode performs the
    // cutover at start; this shows when that failed.)
    if (src?.config.processing && !s[0]?.cutover) degraded.push("cutover_not_performed");
    // The alert receiver refuses every event and alerts stay in the database; the rest works.
    if (s[0]?.alerts) degraded.push(s[0].alerts);
    // The forms the reference leaves open are unconfirmed on this portal until a write probe has
    // passed with the active ones (docs/decisions.md): it works, but nobody has shown it does.
    if (s[0]?.contract) degraded.push(s[0].contract);
    // An operator paused processing (pause_sync): nothing is claimed, the receivers record. Degraded
    // for the same reason as the cutover: the receivers must stay reachable.
    if (src?.config.processing && s[0]?.paused) degraded.push("paused");
    crmAnsweredAt = s[0]?.answered?.getTime() ?? null;
    // Code on the App's tables nobody listed: it never runs with the service's rights, but an
    // operator should know of it (preflight's database.app_tables names it).
    if (
      src &&
      (await appTablesChanged(pool, src.config.env.BITRIX_SYNC_APP_TABLE_HOOKS, src.appTablesCheckMs))
    )
      degraded.push("app_tables_changed");
  }
  src?.health.noteSchema(schema);
  return { fatal, degraded, crmAnsweredAt };
}

/** The portal whose contract readiness asks about: the configured one; none in sandbox mode. */
function contractHost(src?: StatusSource): string | null {
  if (!src || src.config.sandbox) return null;
  return src.config.env.BITRIX_SYNC_PORTAL_HOST ?? null;
}

/**
 * Why the inbox probe failed: a timeout (a lock held on the inbox, a slow database or a full
 * receiver pool), a refusal by the database (e.g. a missing privilege), or no database at all.
 */
function inboxProblem(e: unknown): ReadinessProblem {
  if (isTimeout(e)) return "inbox_write_timeout";
  if (e instanceof InboxProbeRefused) return "inbox_write_failed";
  const code = (e as { code?: unknown }).code;
  // A SQLSTATE outside connection exceptions (08) and operator intervention (57P): the database
  // answered and said no.
  if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && !/^(08|57P)/.test(code))
    return "inbox_write_failed";
  return "database_unreachable";
}

/**
 * The sync loop is one graphile-worker job (job key `sync_loop`) for the whole deployment: with
 * several replicas it runs in whichever took the job, and the others' own heartbeat stands still
 * while they are fine (their receivers write, their runners take jobs). So a replica whose own loop
 * has not beaten is stalled only when no replica started a loop job within WORKER_STALL_MS either
 * (graphile-worker's job rows: a running loop's job is locked, a successor is taken before the
 * loop's budget ends). Found by the rolling-upgrade drill, whose replicas' readiness it samples. A
 * failed query counts as no loop elsewhere.
 */
async function loopRunsElsewhere(pool: pg.Pool): Promise<boolean> {
  try {
    const { rows } = await withDeadline(
      pool.query<{ running: boolean }>(
        `select exists (select 1 from graphile_worker._private_jobs j
                          join graphile_worker._private_tasks t on t.id = j.task_id
                         where t.identifier = 'sync_loop' and j.locked_at > now() - make_interval(secs => $1))
                as running`,
        [WORKER_STALL_MS / 1000],
      ),
      READINESS_DEADLINE_MS,
    );
    return rows[0]?.running === true;
  } catch {
    return false;
  }
}

export async function readiness(pool: pg.Pool, src?: StatusSource, probe?: InboxProbe): Promise<Readiness> {
  const [db, write] = await Promise.all([
    withDeadline(databaseChecks(pool, src), READINESS_DEADLINE_MS).catch(
      (e): DatabaseChecks => ({ fatal: [databaseProblem(e)], degraded: [], crmAnsweredAt: null }),
    ),
    probe
      ? withDeadline(probe(), READINESS_DEADLINE_MS).then(
          () => [],
          (e) => [inboxProblem(e)],
        )
      : [],
  ]);
  const fatal: ReadinessProblem[] = [...new Set([...db.fatal, ...write])];
  const degraded: ReadinessProblem[] = [...db.degraded];
  if (src) {
    const now = Date.now();
    const h = src.health;
    if (
      src.config.processing &&
      now - (h.loopBeatAt ?? h.startedAt) > WORKER_STALL_MS &&
      !(await loopRunsElsewhere(pool))
    )
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
    // §3.3: nothing to map citizenship with; creates go without it, reads cannot name it.
    if (h.citizenship.state === "field_missing") degraded.push("citizenship_field_missing");
    if (h.citizenship.state === "list_empty") degraded.push("citizenship_list_empty");
    // The deployment's view (§14): the last answer the portal gave any replica, so a replica that
    // sat idle through an outage is ready as soon as another one reaches the portal again.
    if (db.crmAnsweredAt !== null) h.noteDeploymentCrmSuccess(db.crmAnsweredAt);
    const lastOk = Math.max(h.lastCrmSuccessAt ?? h.startedAt, h.deploymentCrmSuccessAt ?? 0);
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

/** What the process knows about itself, without the database. */
function processStatus(src: StatusSource) {
  const h = src.health;
  return {
    build: BUILD,
    schema: schemaInfo(h.schema),
    mode: src.config.env.BITRIX_SYNC_MODE,
    sandbox: src.config.sandbox,
    processing: src.config.processing,
    settings_version: src.settings.version(),
    settings_refused_version: src.settings.problem()?.version ?? null,
    crm: {
      last_success_at: iso(h.lastCrmSuccessAt),
      deployment_last_success_at: iso(h.deploymentCrmSuccessAt),
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

async function limiterStatus(src: StatusSource): Promise<z.input<typeof LimiterStatus>> {
  try {
    const l = await withDeadline(src.limiter.state(), STATUS_DEADLINE_MS);
    return {
      tokens: l.tokens,
      rate: l.rate,
      rate_factor: l.rateFactor,
      in_flight: l.inFlight,
      throttled_until: iso(l.throttledUntil),
      blocked_methods: l.blockedMethods.map((b) => ({ method: b.method, until: iso(b.until) })),
    };
  } catch {
    return { error: "unavailable" };
  }
}

/** bitrix_sync.crm_contract_status() (sql/contract/probes.sql): times as JSON prints timestamptz. */
interface ContractStatusRow {
  confirmed: boolean;
  confirmed_at: string | null;
  last_pass_at: string | null;
  forms: { registered_write: string; registered_filter: string; date_filter: string; opened_filter: string };
}

/** A row of bitrix_sync.status_pause, counts cast to int. */
interface PauseRow {
  pause_id: number;
  paused_at: Date;
  paused_by: string;
  paused_db_user: string | null;
  pause_reason: string;
  paused_for_sec: number;
  intents_leased: number;
  workflows_running: number;
  commands_in_hand: number;
  webhooks_processing: number;
  requests_out: number;
  drained: boolean;
}

async function databaseStatus(pool: pg.Pool, portalHost: string | null) {
  const [queue, workflows, commands, webhooks, dlq, alerts, mirror, held, cursors, contract, pause] =
    await Promise.all([
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
      pool.query<{ count: number; oldest_age_sec: number }>(
        "select count::int, oldest_age_sec::int from bitrix_sync.status_held_links",
      ),
      pool.query(
        "select job_type, watermark, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered from bitrix_sync.reconciliation_cursors order by job_type",
      ),
      portalHost === null
        ? Promise.resolve({ rows: [] as Array<{ s: ContractStatusRow }> })
        : pool.query<{ s: ContractStatusRow }>("select bitrix_sync.crm_contract_status($1) as s", [
            portalHost,
          ]),
      // The open pause (sql/status/pause.sql), none while processing runs.
      pool.query<PauseRow>(
        `select pause_id::int, paused_at, paused_by, paused_db_user, pause_reason, paused_for_sec::int,
              intents_leased::int, workflows_running::int, commands_in_hand::int, webhooks_processing::int,
              requests_out::int, drained
         from bitrix_sync.status_pause`,
      ),
    ]);
  const c = contract.rows[0]?.s;
  const p = pause.rows[0];
  return {
    queue: queue.rows,
    workflows: workflows.rows,
    commands: commands.rows,
    webhooks: webhooks.rows,
    dead_letters: dlq.rows,
    business_alerts: alerts.rows,
    alert_mirror: mirror.rows,
    held_links: held.rows[0] ?? { count: 0, oldest_age_sec: 0 },
    crm_contract: c
      ? {
          confirmed: c.confirmed,
          confirmed_at: iso(c.confirmed_at === null ? null : Date.parse(c.confirmed_at)),
          last_pass_at: iso(c.last_pass_at === null ? null : Date.parse(c.last_pass_at)),
          forms: c.forms,
        }
      : null,
    reconciliation: cursors.rows,
    pause: p
      ? {
          pause_id: p.pause_id,
          since: p.paused_at.toISOString(),
          by: p.paused_by,
          db_user: p.paused_db_user,
          reason: p.pause_reason,
          paused_for_sec: Math.max(0, p.paused_for_sec),
          in_hand: {
            intents_leased: p.intents_leased,
            workflows_running: p.workflows_running,
            commands_in_hand: p.commands_in_hand,
            webhooks_processing: p.webhooks_processing,
            requests_out: p.requests_out,
          },
          drained: p.drained,
        }
      : null,
  };
}

/**
 * The internal status document (§14). `ok` false: the database part failed or missed its deadline;
 * the document then holds `error` (database_timeout or database_unreachable), readiness and what
 * the process knows, and is answered 503.
 */
export async function statusDocument(
  pool: pg.Pool,
  src: StatusSource,
  probe?: InboxProbe,
): Promise<
  { ok: true; body: z.input<typeof StatusBody> } | { ok: false; body: z.input<typeof StatusUnavailableBody> }
> {
  const [ready, db, limiter] = await Promise.all([
    readiness(pool, src, probe),
    withDeadline(databaseStatus(pool, contractHost(src)), STATUS_DEADLINE_MS).then(
      (rows) => ({ ok: true as const, rows }),
      (e) => ({ ok: false as const, error: databaseProblem(e) }),
    ),
    limiterStatus(src),
  ]);
  const known = processStatus(src);
  if (!db.ok) return { ok: false, body: { error: db.error, ...known, readiness: ready, limiter } };
  return { ok: true, body: { ...known, readiness: ready, ...db.rows, limiter } };
}
