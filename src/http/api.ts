// The HTTP API as data (one listener, docs/operations.md "Health, status and metrics"): every endpoint's path, request and answers, with
// the zod schemas the handlers validate with or are typed by. src/http/app.ts mounts its routes from
// API_PATHS, the receivers answer what src/inbound/refusals.ts lists, and `npm run docs:openapi`
// (src/http/openapi.ts) generates docs/openapi.json from this file, so the document cannot drift.
import { z } from "zod";
import { EnvSchema } from "../config/env.js";
import { ROBOT_FORM, ROBOT_QUERY } from "../inbound/contract.js";
import { RECEIVER_REFUSALS, type RefusalStatus } from "../inbound/refusals.js";

export const API_PATHS = {
  live: "/health/live",
  ready: "/health/ready",
  status: "/internal/sync/v1/status",
  metrics: "/metrics",
  contactReceiver: "/bitrix/sync/webhook/contact",
  alertReceiver: "/bitrix/sync/webhook/alert",
} as const;

const time = z.string().meta({ format: "date-time" });
const nullableTime = time.nullable();
const count = z.number().int().min(0);
const age = z.number().int().min(0).nullable().meta({ description: "Seconds; null when there is none." });

/** An error answer: one fixed code, never a value, an ID or a stack. */
function errorBody<const E extends readonly [string, ...string[]]>(codes: E) {
  return z.object({ error: z.enum(codes) });
}

export const LiveBody = z.object({ status: z.literal("live") });

/** Readiness verdicts, worst last. */
export const READINESS_STATUSES = ["ready", "degraded", "not_ready"] as const;

/** Every problem readiness can name (a fixed code each; /metrics exports each as a gauge). */
export const READINESS_PROBLEMS = [
  "app_tables_changed",
  "alert_config_invalid",
  "citizenship_field_missing",
  "citizenship_list_empty",
  "crm_contract_unconfirmed",
  "crm_credential_rejected",
  "crm_permission_denied",
  "crm_stale",
  "cutover_not_performed",
  "database_timeout",
  "database_unreachable",
  "inbox_write_failed",
  "inbox_write_timeout",
  "migrations_pending",
  "paused",
  "portal_identity_missing",
  "queue_grants_missing",
  "receiver_tokens_missing",
  "schema_outside_window",
  "settings_unparsable",
  "worker_stalled",
] as const;

export const ReadinessBody = z.object({
  status: z.enum(READINESS_STATUSES),
  problems: z.array(z.enum(READINESS_PROBLEMS)),
});

/** The build the answering process runs (src/version.ts). */
export const BuildInfo = z.object({
  version: z.string().meta({ description: "BITRIX_SYNC_VERSION of the image, else package.json's version." }),
  revision: z.string().meta({
    description:
      "The commit the build came from: BITRIX_SYNC_REVISION of the image, else the checkout's HEAD, else unknown.",
  }),
});

/**
 * The schema this release runs on and the one the database holds (src/db/schema-window.ts;
 * docs/operations.md, "The compatibility window"). Schemas are migration numbers (000042).
 */
export const SchemaInfo = z.object({
  release: z.string().meta({
    description:
      "This release's schema: its newest migration. It runs on that schema and on every later one whose contract floor is at most it.",
  }),
  database: z.string().nullable().meta({
    description:
      "The database's schema: its newest applied migration, as readiness last read it; null: not read yet.",
  }),
  contract_floor: z.string().nullable().meta({
    description:
      "The oldest release schema a contract migration still lets run on the database; null: no migration has contracted.",
  }),
  in_window: z.boolean().nullable().meta({
    description: "The database's schema is inside this release's window; null: not read yet.",
  }),
});

/** What GET /health/ready answers: the readiness, the build that decided it and the schemas. */
export const ReadinessAnswerBody = ReadinessBody.extend({ build: BuildInfo, schema: SchemaInfo });

const safeCode = z.string().meta({ description: "A safe error code, never a message." });

const ProcessStatus = z.object({
  build: BuildInfo,
  schema: SchemaInfo,
  mode: EnvSchema.shape.BITRIX_SYNC_MODE.unwrap(),
  sandbox: z.boolean(),
  processing: z.boolean(),
  settings_version: z.number().int().nullable(),
  settings_refused_version: z.number().int().nullable(),
  crm: z.object({
    last_success_at: nullableTime.meta({ description: "This process's last CRM success." }),
    deployment_last_success_at: nullableTime.meta({
      description:
        "When the portal last answered any replica (HTTP 2xx), as readiness last read it; crm_stale goes by the later of the two.",
    }),
    last_failure: z.object({ code: safeCode, at: nullableTime }).nullable(),
    credential_problem: z.object({ code: safeCode, at: nullableTime }).nullable(),
    permission_problems: z.array(z.object({ method: z.string(), code: safeCode, at: nullableTime })),
  }),
  worker: z.object({ last_heartbeat_at: nullableTime }),
});

export const LimiterStatus = z.union([
  z.object({
    tokens: z.number(),
    rate: z.number(),
    rate_factor: z.number(),
    in_flight: count,
    throttled_until: nullableTime,
    blocked_methods: z.array(z.object({ method: z.string(), until: nullableTime })),
  }),
  z.object({ error: z.literal("unavailable") }),
]);

/** The internal status document (§14): counts, ages, codes and times; no PII, IDs or raw errors. */
export const StatusBody = ProcessStatus.extend({
  readiness: ReadinessBody,
  queue: z.array(z.object({ status: z.string(), count, oldest_age_sec: age })),
  workflows: z.array(z.object({ workflow_type: z.string(), state: z.string(), count, oldest_age_sec: age })),
  commands: z.array(z.object({ command_type: z.string(), status: z.string(), count, oldest_age_sec: age })),
  webhooks: z.array(z.object({ receiver: z.string(), status: z.string(), count, oldest_age_sec: age })),
  dead_letters: z.array(
    z.object({
      source: z.string(),
      operation: z.string(),
      error_code: z.string().nullable(),
      count,
      oldest_age_sec: age,
    }),
  ),
  business_alerts: z.array(
    z.object({ alert_type: z.string(), severity: z.string(), open_count: count, sla_overdue: count }),
  ),
  alert_mirror: z.array(z.object({ mirror_status: z.string(), count, oldest_age_sec: age })),
  /** Links made by phone alone whose CRM-master fields are held back (mapping.hold_after_phone_link). */
  held_links: z.object({ count, oldest_age_sec: age }),
  /**
   * The portal's REST contract (docs/portal-setup.md): whether a write probe (npm run preflight --
   * --write) has passed against the configured portal with the forms the active settings use; null
   * in sandbox mode (the emulator is the project's own).
   */
  crm_contract: z
    .object({
      confirmed: z.boolean(),
      confirmed_at: nullableTime,
      last_pass_at: nullableTime,
      forms: z.object({
        registered_write: z.string(),
        registered_filter: z.string(),
        date_filter: z.string(),
        opened_filter: z.string(),
      }),
    })
    .nullable(),
  reconciliation: z.array(
    z.object({
      job_type: z.string(),
      watermark: nullableTime,
      last_success_at: nullableTime,
      last_run_status: z.string().nullable(),
      last_error_code: z.string().nullable(),
      last_scanned: count.nullable(),
      last_updated: count.nullable(),
      last_recovered: count.nullable(),
    }),
  ),
  limiter: LimiterStatus,
  /** The open pause (pause_sync, §17), null while processing runs. */
  pause: z
    .object({
      pause_id: z.number().int(),
      since: time,
      by: z.string().meta({ description: "Who paused, as the operator declared it." }),
      db_user: z.string().nullable().meta({ description: "The database login that paused." }),
      reason: z.string().meta({ description: "Why, in the operator's words." }),
      paused_for_sec: count,
      in_hand: z.object({
        intents_leased: count,
        workflows_running: count,
        commands_in_hand: count,
        webhooks_processing: count,
        requests_out: count,
      }),
      drained: z.boolean().meta({ description: "Nothing claimed before the pause is still finishing." }),
    })
    .nullable(),
});

/** The status document when its database part failed or missed its deadline (answered 503). */
export const StatusUnavailableBody = ProcessStatus.extend({
  error: z.enum(["database_timeout", "database_unreachable"]),
  readiness: ReadinessBody,
  limiter: LimiterStatus,
});

const AcceptedBody = z.object({ status: z.literal("accepted") });

/** One answer of an operation. */
export interface ApiResponse {
  description: string;
  /** A JSON body; for text bodies `text` instead. */
  schema?: z.ZodType;
  /** A name under components.schemas. */
  name?: string;
  text?: { contentType: string; description: string };
  headers?: Record<string, string>;
  /** Receivers only: the reasons (metric and log label) behind this answer. */
  reasons?: readonly string[];
}

export interface ApiOperation {
  path: string;
  method: "get" | "post";
  operationId: string;
  summary: string;
  description: string;
  tags: string[];
  security?: "bearer";
  query?: z.ZodObject;
  form?: { schema: z.ZodType; name: string };
  responses: Record<number, ApiResponse>;
}

const NOT_FOUND = errorBody(["not_found"]);
const INTERNAL = errorBody(["internal_error"]);

function receiverOperation(receiver: "contact" | "alert"): ApiOperation {
  const refusals = Object.fromEntries(
    (Object.keys(RECEIVER_REFUSALS) as unknown as RefusalStatus[]).map((status) => {
      const r = RECEIVER_REFUSALS[status];
      const res: ApiResponse = {
        description: r.description,
        schema: errorBody(r.errors),
        reasons: r.reasons,
        ...(Number(status) === 405 ? { headers: { Allow: "POST" } } : {}),
      };
      return [Number(status), res];
    }),
  );
  const what = receiver === "contact" ? "a Contact" : "an alert's smart-process item";
  return {
    path: receiver === "contact" ? API_PATHS.contactReceiver : API_PATHS.alertReceiver,
    method: "post",
    operationId: `receive${receiver === "contact" ? "Contact" : "Alert"}Webhook`,
    summary: `Robot webhook: ${what} changed`,
    description: `The Bitrix24 robot's "Webhook" request (§10.1): the token and ID in the query, the document and the portal identity in a form body. Checked in order (method, configuration, content type, sizes, token, query and form, portal identity, entity type) and recorded durably; no business work happens in the request. Public through nginx, which also checks the source address (docs/deployment.md). Refusal bodies carry only the error code; the reason is in the log line and in bitrix_sync_webhook_rejected_total{receiver,reason}.`,
    tags: ["receivers"],
    query: ROBOT_QUERY,
    form: { schema: ROBOT_FORM[receiver], name: `${receiver === "contact" ? "Contact" : "Alert"}RobotForm` },
    responses: {
      200: { description: "Recorded in the inbox.", schema: AcceptedBody, name: "AcceptedBody" },
      ...refusals,
    },
  };
}

export const API_OPERATIONS: ApiOperation[] = [
  {
    path: API_PATHS.live,
    method: "get",
    operationId: "getLiveness",
    summary: "Liveness",
    description: "The process and its event loop answer. Asks neither the database nor the CRM (§14).",
    tags: ["health"],
    responses: { 200: { description: "Alive.", schema: LiveBody, name: "LiveBody" } },
  },
  {
    path: API_PATHS.ready,
    method: "get",
    operationId: "getReadiness",
    summary: "Readiness",
    description:
      "Configuration, database, grants, workers, limiter, receivers and portal identity (§14). Answers within 2.5 s whatever the database does; each problem is a fixed code (docs/operations.md).",
    tags: ["health"],
    responses: {
      200: {
        description: "ready, or degraded (e.g. a short CRM outage).",
        schema: ReadinessAnswerBody,
        name: "ReadinessAnswerBody",
      },
      503: {
        description: "not_ready: a problem that stops the service.",
        schema: ReadinessAnswerBody,
        name: "ReadinessAnswerBody",
      },
    },
  },
  {
    path: API_PATHS.status,
    method: "get",
    operationId: "getStatus",
    summary: "Internal status",
    description:
      "Mode, queue, workflows, commands, webhooks, dead letters, alerts, reconciliation cursors, limiter and the CRM's last success (§14). Internal only: not on the public nginx. Bearer BITRIX_SYNC_SERVICE_TOKEN.",
    tags: ["internal"],
    security: "bearer",
    responses: {
      200: { description: "The status document.", schema: StatusBody, name: "StatusBody" },
      401: { description: "No or a wrong bearer token.", schema: errorBody(["unauthorized"]) },
      503: {
        description:
          "The database part failed or missed its 4 s deadline (the body says which, with what the process knows), or the status endpoint is not configured (no service token).",
        schema: z.union([StatusUnavailableBody, errorBody(["status_not_configured"])]),
        name: "StatusUnavailable",
      },
    },
  },
  {
    path: API_PATHS.metrics,
    method: "get",
    operationId: "getMetrics",
    summary: "Prometheus metrics",
    description:
      "The service's metrics in the Prometheus text format (docs/observability.md). Labels are low-cardinality only; no PII. Internal only.",
    tags: ["internal"],
    responses: {
      200: {
        description: "Metrics.",
        text: {
          contentType: "text/plain; version=0.0.4; charset=utf-8",
          description: "Prometheus exposition format 0.0.4.",
        },
      },
    },
  },
  receiverOperation("contact"),
  receiverOperation("alert"),
];

/** An answer of every operation: an unhandled error. */
export const COMMON_RESPONSES: Record<number, ApiResponse> = {
  500: { description: "An unexpected error; the body never carries its message.", schema: INTERNAL },
};

/** What any path not listed answers (404); in the document's description, being no operation's. */
export const NOT_FOUND_BODY = NOT_FOUND;
