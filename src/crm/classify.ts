// A 503, and every other failure, is classified here. QUERY_LIMIT_EXCEEDED (503) is transient, spends
// no attempt and lowers the limiter's rate; OVERLOAD_LIMIT (503) is transient with the normal
// backoff. Any other 5xx is transient on a read (the pump retries it with backoff until the 24 h
// horizon) and uncertain on a write: what follows, and when it gives up, is
// ../workflows/decide/unanswered-write.ts.
//
// The one place where a CRM reply, a transport failure or a data problem becomes a failure kind
// (§9). Callers switch exhaustively on `kind`; `code` is a fixed snake_case word that is safe for
// logs, the database and metric labels. Raw descriptions never leave this module.
//
// Reference facts this encodes (../shared/reference/bitrix24-rest.md):
// - QUERY_LIMIT_EXCEEDED and OVERLOAD_LIMIT both come as 503: split by code, not by status.
// - QUERY_LIMIT_EXCEEDED and OPERATION_TIME_LIMIT are refused before execution, so even a write may
//   be retried, and neither spends an attempt.
// - OPERATION_TIME_LIMIT carries no timing: block until the method's last seen operating_reset_at.
// - Legacy crm.contact.* errors have an empty `error` and only a description: match the text.
// - crm.item.* answers ACCESS_DENIED and NOT_FOUND with 400, so status alone says little.

/** What the caller does next: retry, reconcile, dead-letter, or wait for a person. */
export type FailureKind = "transient" | "uncertain" | "permanent" | "business";

/** Every code the classifier can return. Fixed words only: safe to log and to use as a label. */
export const FAILURE_CODES = [
  "batch_rejected",
  "batch_result_missing",
  "connect_failed",
  "connect_timeout",
  "connection_lost",
  "credential_rejected",
  "crm_rejected",
  "dns_failure",
  "insufficient_scope",
  "invalid_argument",
  "invalid_phone",
  "invalid_request",
  "malformed_reply",
  "method_not_found",
  "not_found",
  "operation_time_limit",
  "overload_limit",
  "permission_denied",
  "plan_restricted",
  "portal_redirect",
  "query_limit_exceeded",
  "rate_limited",
  "request_timeout",
  "server_error",
  "timeout_no_reply",
  "tls_failure",
  "unexpected_status",
  "unknown_citizenship",
] as const;
export type FailureCode = (typeof FAILURE_CODES)[number];

/**
 * Codes the pump's hydration refuses a command with before sending it (src/workflows/command-payloads.ts):
 * the App's user is no longer eligible, or the command's parameters are broken.
 */
export const HYDRATION_CODES = ["invalid_params", "invalid_phone", "user_not_eligible"] as const;
export type HydrationCode = (typeof HYDRATION_CODES)[number];

/**
 * Failures of the portal as a whole rather than of one command: server errors, lost or refused
 * connections, replies that are not JSON, limit refusals. A batch failing with one of these marks the
 * portal down for its process, and retries waiting for one of them are brought forward when the
 * portal answers again (bring_forward_commands; src/workflows/pump-portal.ts).
 */
export const PORTAL_WIDE_CODES: readonly FailureCode[] = [
  "connect_failed",
  "connect_timeout",
  "connection_lost",
  "dns_failure",
  "malformed_reply",
  "query_limit_exceeded",
  "rate_limited",
  "request_timeout",
  "server_error",
  "timeout_no_reply",
  "tls_failure",
];

/** A failure of the portal as a whole (PORTAL_WIDE_CODES). */
export function isPortalWide(code: string): boolean {
  return (PORTAL_WIDE_CODES as readonly string[]).includes(code);
}

/**
 * Codes of command failures that are business problems for a person, not technical ones (§9): the
 * workflow stops its pass, whatever step was waiting (src/workflows/decide/pass.ts, businessStop).
 */
export const BUSINESS_CODES: ReadonlySet<FailureCode | HydrationCode> = new Set([
  "invalid_phone",
  "unknown_citizenship",
  "user_not_eligible",
] as const);

/** Codes meaning the Contact (or item) does not exist (legacy replies carry an empty error code). */
export const NOT_FOUND_CODES: ReadonlySet<FailureCode> = new Set(["not_found"] as const);

/** The classifier's verdict on one command. */
export interface Classification {
  kind: FailureKind;
  code: FailureCode;
  /** false for limit refusals (§9: they do not use up the retry budget). */
  spendsAttempt: boolean;
  /** A delay the portal asked for (or implied); it wins over the local backoff. */
  retryAfterMs?: number;
  /** OPERATION_TIME_LIMIT: no command of this method before this instant (epoch ms). */
  blockMethodUntil?: number;
  /** QUERY_LIMIT_EXCEEDED and friends: tell the limiter to lower its rate. */
  lowerRate?: boolean;
  /** HTTP status of the reply, when there was one. */
  httpStatus?: number;
  /** Bitrix error code when it is a plain identifier (never the description). */
  bitrixError?: string;
}

/** What happened to one command, as seen by the transport. */
export type CrmOutcome =
  /** An HTTP reply whose body parsed as JSON but is not a success for this command. */
  | { type: "reply"; status: number; body: unknown }
  /** A per-command entry of `result.result_error` inside a batch answered with 200. */
  | { type: "command_error"; entry: unknown }
  /** The body was not JSON, or not the shape the command returns. The request had been sent. */
  | { type: "malformed"; status?: number }
  /** No reply. `sent` says whether the request bytes had left; `code` is Node's/undici's error code. */
  | { type: "network"; sent: boolean; code?: string }
  /** A batch answered 200 but said nothing about this command. */
  | { type: "missing" }
  /** Our own validation refused the data before any call (§3.3). */
  | { type: "invalid_data"; code: "invalid_phone" | "unknown_citizenship" | "invalid_params" };

export interface ClassifyContext {
  /** A create or update: a request that may have been applied is then `uncertain`, not `transient`. */
  write: boolean;
  /** Clock for computing absolute instants; defaults to Date.now(). */
  now?: number;
  /** The method's last `time.operating_reset_at` (epoch ms), if any reply carried one. */
  operatingResetAt?: number;
}

/** Used when OPERATION_TIME_LIMIT arrives and no reply of that method ever told us its reset time. */
export const DEFAULT_METHOD_BLOCK_MS = 60_000;
/** One leaky-bucket slot drains in 500 ms at 2/s; wait a little longer before trying again. */
const QUERY_LIMIT_RETRY_MS = 1_000;

const SAFE_IDENT = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;

function errorFields(body: unknown): { error: string; description: string } | null {
  if (typeof body === "string") return { error: "", description: body };
  if (body === null || typeof body !== "object" || Array.isArray(body)) return null;
  const b = body as Record<string, unknown>;
  if (!("error" in b)) return null;
  const error = typeof b.error === "string" ? b.error : "";
  const description = typeof b.error_description === "string" ? b.error_description : "";
  return { error, description };
}

function verdict(
  kind: FailureKind,
  code: FailureCode,
  extra: Partial<Omit<Classification, "kind" | "code">> = {},
): Classification {
  return { kind, code, spendsAttempt: extra.spendsAttempt ?? true, ...extra };
}

/** A failure after the request may have reached the portal: a write becomes uncertain. */
function afterSend(
  code: FailureCode,
  ctx: ClassifyContext,
  extra: Partial<Classification> = {},
): Classification {
  return verdict(ctx.write ? "uncertain" : "transient", code, extra);
}

function byBitrixCode(
  error: string,
  ctx: ClassifyContext,
  extra: Partial<Classification>,
): Classification | null {
  const now = ctx.now ?? Date.now();
  switch (error.toUpperCase()) {
    case "QUERY_LIMIT_EXCEEDED":
      return verdict("transient", "query_limit_exceeded", {
        ...extra,
        spendsAttempt: false,
        lowerRate: true,
        retryAfterMs: QUERY_LIMIT_RETRY_MS,
      });
    case "OPERATION_TIME_LIMIT": {
      const until =
        ctx.operatingResetAt !== undefined && ctx.operatingResetAt > now
          ? ctx.operatingResetAt
          : now + DEFAULT_METHOD_BLOCK_MS;
      return verdict("transient", "operation_time_limit", {
        ...extra,
        spendsAttempt: false,
        blockMethodUntil: until,
        retryAfterMs: until - now,
      });
    }
    case "OVERLOAD_LIMIT":
      // A block set by Bitrix support: same 503 as the rate limit, but it lasts; normal backoff.
      return verdict("transient", "overload_limit", { ...extra, lowerRate: true });
    case "NO_AUTH_FOUND":
    case "INVALID_CREDENTIALS":
    case "EXPIRED_TOKEN":
    case "INVALID_TOKEN":
    case "WRONG_AUTH_TYPE":
      return verdict("permanent", "credential_rejected", extra);
    case "INSUFFICIENT_SCOPE":
      return verdict("permanent", "insufficient_scope", extra);
    case "ACCESS_DENIED":
    case "ALLOWED_ONLY_INTRANET_USER":
    case "USER_ACCESS_ERROR":
      return verdict("permanent", "permission_denied", extra);
    case "ERROR_METHOD_NOT_FOUND":
    case "METHOD_NOT_FOUND":
      return verdict("permanent", "method_not_found", extra);
    case "INVALID_REQUEST":
      return verdict("permanent", "invalid_request", extra);
    case "ERROR_BATCH_METHOD_NOT_ALLOWED":
    case "ERROR_BATCH_LENGTH_EXCEEDED":
      return verdict("permanent", "batch_rejected", extra);
    case "INVALID_ARG_VALUE":
    case "ERROR_ARGUMENT":
    case "ERROR_CORE":
      return verdict("permanent", "invalid_argument", extra);
    case "CREATE_DYNAMIC_ITEM_RESTRICTED":
      return verdict("permanent", "plan_restricted", extra);
    case "NOT_FOUND":
    case "ERROR_NOT_FOUND":
      return verdict("business", "not_found", extra);
    case "INTERNAL_SERVER_ERROR":
    case "ERROR_UNEXPECTED_ANSWER":
      return afterSend("server_error", ctx, extra);
    default:
      return null;
  }
}

/** Legacy CRM errors: empty `error`, the meaning is in the English description. */
function byDescription(description: string, extra: Partial<Classification>): Classification | null {
  const d = description.toLowerCase();
  if (d.includes("not found")) return verdict("business", "not_found", extra);
  if (d.includes("access denied")) return verdict("permanent", "permission_denied", extra);
  if (/must be array|not defined|invalid|required|empty/.test(d)) {
    return verdict("permanent", "invalid_argument", extra);
  }
  return null;
}

function byStatus(status: number, ctx: ClassifyContext, extra: Partial<Classification>): Classification {
  if (status === 401) return verdict("permanent", "credential_rejected", extra);
  if (status === 403) return verdict("permanent", "permission_denied", extra);
  if (status === 404) return verdict("permanent", "method_not_found", extra);
  if (status === 408) return verdict("transient", "request_timeout", extra);
  if (status === 429) {
    return verdict("transient", "rate_limited", {
      ...extra,
      spendsAttempt: false,
      lowerRate: true,
      retryAfterMs: QUERY_LIMIT_RETRY_MS,
    });
  }
  if (status >= 500 && status <= 599) return afterSend("server_error", ctx, extra);
  if (status >= 400 && status <= 499) return verdict("permanent", "crm_rejected", extra);
  if (status >= 200 && status <= 299) return afterSend("malformed_reply", ctx, extra);
  return verdict("permanent", "unexpected_status", extra);
}

const NOT_SENT_CODES: Record<string, FailureCode> = {
  EAI_AGAIN: "dns_failure",
  ENOTFOUND: "dns_failure",
  CLIENT_TIMEOUT: "connect_timeout",
  UND_ERR_CONNECT_TIMEOUT: "connect_timeout",
  ETIMEDOUT: "connect_timeout",
};

function network(sent: boolean, code: string | undefined, ctx: ClassifyContext): Classification {
  const c = code ?? "";
  if (!sent) {
    if (NOT_SENT_CODES[c]) return verdict("transient", NOT_SENT_CODES[c]);
    if (/CERT|TLS|SSL|SELF_SIGNED|UNABLE_TO_VERIFY/i.test(c)) return verdict("transient", "tls_failure");
    return verdict("transient", "connect_failed");
  }
  if (/TIMEOUT|ABORT/i.test(c)) return afterSend("timeout_no_reply", ctx);
  return afterSend("connection_lost", ctx);
}

/** Classifies one outcome for one command (§9). Pure: no I/O, no clock unless `ctx.now` is absent. */
export function classify(outcome: CrmOutcome, ctx: ClassifyContext): Classification {
  switch (outcome.type) {
    case "network":
      return network(outcome.sent, outcome.code, ctx);
    case "malformed":
      return afterSend(
        "malformed_reply",
        ctx,
        outcome.status === undefined ? {} : { httpStatus: outcome.status },
      );
    case "missing":
      return afterSend("batch_result_missing", ctx);
    case "invalid_data":
      // Bad parameters are our bug, not the user's data: dead-letter them for a developer.
      if (outcome.code === "invalid_params") return verdict("permanent", "invalid_argument");
      return verdict("business", outcome.code);
    case "command_error":
    case "reply": {
      const status = outcome.type === "reply" ? outcome.status : undefined;
      const body = outcome.type === "reply" ? outcome.body : outcome.entry;
      const extra: Partial<Classification> = status === undefined ? {} : { httpStatus: status };
      if (status !== undefined && status >= 300 && status <= 399) {
        // The portal was renamed: the old host answers 302. Following it would be a redirect to a
        // host nobody approved (§16), so this is a configuration error until a person fixes it.
        return verdict("permanent", "portal_redirect", extra);
      }
      const fields = errorFields(body);
      if (fields) {
        if (SAFE_IDENT.test(fields.error)) extra.bitrixError = fields.error;
        if (fields.error !== "") {
          const known = byBitrixCode(fields.error, ctx, extra);
          if (known) return known;
        } else {
          const legacy = byDescription(fields.description, extra);
          if (legacy) return legacy;
        }
      } else if (status !== undefined && status >= 200 && status <= 299) {
        return afterSend("malformed_reply", ctx, extra);
      }
      if (status === undefined) {
        // A batch sub-command error without a code we know: a refusal, not a transport problem.
        return verdict("permanent", "crm_rejected", extra);
      }
      return byStatus(status, ctx, extra);
    }
  }
}
