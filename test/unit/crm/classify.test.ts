import test from "ava";
import {
  BUSINESS_CODES,
  type Classification,
  type ClassifyContext,
  type CrmOutcome,
  classify,
  DEFAULT_METHOD_BLOCK_MS,
  FAILURE_CODES,
  type FailureKind,
  HYDRATION_CODES,
  isPortalWide,
  NOT_FOUND_CODES,
  PORTAL_WIDE_CODES,
} from "../../../src/crm/classify.js";

const NOW = 1_800_000_000_000;
const READ: ClassifyContext = { write: false, now: NOW };
const WRITE: ClassifyContext = { write: true, now: NOW };

interface Row {
  name: string;
  outcome: CrmOutcome;
  ctx: ClassifyContext;
  kind: FailureKind;
  code: Classification["code"];
  spendsAttempt?: boolean;
  check?: (c: Classification) => boolean;
}

const err = (status: number, error: string, description = "") => ({
  type: "reply" as const,
  status,
  body: { error, error_description: description },
});

// One row per case of §9 and of the reference's error tables.
const ROWS: Row[] = [
  // transient
  {
    name: "503 QUERY_LIMIT_EXCEEDED: transient, no attempt spent, lowers the rate",
    outcome: err(503, "QUERY_LIMIT_EXCEEDED", "Too many requests"),
    ctx: WRITE,
    kind: "transient",
    code: "query_limit_exceeded",
    spendsAttempt: false,
    check: (c) => c.lowerRate === true && (c.retryAfterMs ?? 0) > 0,
  },
  {
    name: "QUERY_LIMIT_EXCEEDED inside a batch: same verdict",
    outcome: { type: "command_error", entry: { error: "QUERY_LIMIT_EXCEEDED", error_description: "" } },
    ctx: READ,
    kind: "transient",
    code: "query_limit_exceeded",
    spendsAttempt: false,
  },
  {
    name: "429 OPERATION_TIME_LIMIT blocks the method until its last operating_reset_at",
    outcome: err(429, "OPERATION_TIME_LIMIT", "Method is blocked due to operation time limit."),
    ctx: { write: false, now: NOW, operatingResetAt: NOW + 90_000 },
    kind: "transient",
    code: "operation_time_limit",
    spendsAttempt: false,
    check: (c) => c.blockMethodUntil === NOW + 90_000 && c.retryAfterMs === 90_000 && c.lowerRate !== true,
  },
  {
    name: "OPERATION_TIME_LIMIT inside a batch with no known reset time: a default block",
    outcome: {
      type: "command_error",
      entry: {
        error: "OPERATION_TIME_LIMIT",
        error_description: "Method is blocked due to operation time limit.",
      },
    },
    ctx: WRITE,
    kind: "transient",
    code: "operation_time_limit",
    spendsAttempt: false,
    check: (c) => c.blockMethodUntil === NOW + DEFAULT_METHOD_BLOCK_MS,
  },
  {
    name: "OPERATION_TIME_LIMIT with a reset time already past: a default block",
    outcome: err(429, "OPERATION_TIME_LIMIT"),
    ctx: { write: false, now: NOW, operatingResetAt: NOW - 1 },
    kind: "transient",
    code: "operation_time_limit",
    check: (c) => c.blockMethodUntil === NOW + DEFAULT_METHOD_BLOCK_MS,
  },
  {
    name: "503 OVERLOAD_LIMIT: transient, spends attempts (a support block lasts)",
    outcome: err(503, "OVERLOAD_LIMIT"),
    ctx: READ,
    kind: "transient",
    code: "overload_limit",
    spendsAttempt: true,
  },
  {
    name: "429 without a code: transient rate limit",
    outcome: { type: "reply", status: 429, body: null },
    ctx: READ,
    kind: "transient",
    code: "rate_limited",
    spendsAttempt: false,
  },
  {
    name: "408 request timeout: transient",
    outcome: { type: "reply", status: 408, body: null },
    ctx: WRITE,
    kind: "transient",
    code: "request_timeout",
  },
  {
    name: "500 INTERNAL_SERVER_ERROR on a read: transient",
    outcome: err(500, "INTERNAL_SERVER_ERROR"),
    ctx: READ,
    kind: "transient",
    code: "server_error",
  },
  {
    name: "502 HTML from a proxy on a read: transient",
    outcome: { type: "reply", status: 502, body: null },
    ctx: READ,
    kind: "transient",
    code: "server_error",
  },
  {
    name: "connection refused (nothing sent) on a write: transient",
    outcome: { type: "network", sent: false, code: "ECONNREFUSED" },
    ctx: WRITE,
    kind: "transient",
    code: "connect_failed",
  },
  {
    name: "connect timeout before send on a write: transient",
    outcome: { type: "network", sent: false, code: "UND_ERR_CONNECT_TIMEOUT" },
    ctx: WRITE,
    kind: "transient",
    code: "connect_timeout",
  },
  {
    name: "our deadline before the request left: transient",
    outcome: { type: "network", sent: false, code: "CLIENT_TIMEOUT" },
    ctx: WRITE,
    kind: "transient",
    code: "connect_timeout",
  },
  {
    name: "DNS failure: transient",
    outcome: { type: "network", sent: false, code: "EAI_AGAIN" },
    ctx: READ,
    kind: "transient",
    code: "dns_failure",
  },
  {
    name: "TLS failure: transient",
    outcome: { type: "network", sent: false, code: "UNABLE_TO_VERIFY_LEAF_SIGNATURE" },
    ctx: READ,
    kind: "transient",
    code: "tls_failure",
  },
  {
    name: "read sent, no reply before the deadline: transient",
    outcome: { type: "network", sent: true, code: "CLIENT_TIMEOUT" },
    ctx: READ,
    kind: "transient",
    code: "timeout_no_reply",
  },
  {
    name: "read sent, connection reset: transient",
    outcome: { type: "network", sent: true, code: "ECONNRESET" },
    ctx: READ,
    kind: "transient",
    code: "connection_lost",
  },
  {
    name: "malformed JSON for a read: transient",
    outcome: { type: "malformed", status: 200 },
    ctx: READ,
    kind: "transient",
    code: "malformed_reply",
  },
  {
    name: "200 without result or error for a read: transient malformed",
    outcome: { type: "reply", status: 200, body: { unexpected: true } },
    ctx: READ,
    kind: "transient",
    code: "malformed_reply",
  },
  // uncertain
  {
    name: "write sent, no reply before the deadline: uncertain",
    outcome: { type: "network", sent: true, code: "CLIENT_TIMEOUT" },
    ctx: WRITE,
    kind: "uncertain",
    code: "timeout_no_reply",
  },
  {
    name: "write sent, headers timeout: uncertain",
    outcome: { type: "network", sent: true, code: "UND_ERR_HEADERS_TIMEOUT" },
    ctx: WRITE,
    kind: "uncertain",
    code: "timeout_no_reply",
  },
  {
    name: "write sent, socket closed: uncertain",
    outcome: { type: "network", sent: true, code: "UND_ERR_SOCKET" },
    ctx: WRITE,
    kind: "uncertain",
    code: "connection_lost",
  },
  {
    name: "malformed JSON after a sent write: uncertain",
    outcome: { type: "malformed", status: 200 },
    ctx: WRITE,
    kind: "uncertain",
    code: "malformed_reply",
  },
  {
    name: "500 on a write (it may have been applied): uncertain",
    outcome: err(500, "INTERNAL_SERVER_ERROR"),
    ctx: WRITE,
    kind: "uncertain",
    code: "server_error",
  },
  {
    name: "504 from a proxy on a write: uncertain",
    outcome: { type: "reply", status: 504, body: null },
    ctx: WRITE,
    kind: "uncertain",
    code: "server_error",
  },
  {
    name: "batch 200 without this write's key: uncertain",
    outcome: { type: "missing" },
    ctx: WRITE,
    kind: "uncertain",
    code: "batch_result_missing",
  },
  // permanent
  {
    name: "302 (portal renamed): permanent configuration error",
    outcome: { type: "reply", status: 302, body: null },
    ctx: READ,
    kind: "permanent",
    code: "portal_redirect",
  },
  {
    name: "401 NO_AUTH_FOUND: credential rejected",
    outcome: err(401, "NO_AUTH_FOUND", "Wrong authorization data"),
    ctx: READ,
    kind: "permanent",
    code: "credential_rejected",
  },
  {
    name: "401 INVALID_CREDENTIALS (revoked webhook): credential rejected",
    outcome: err(401, "INVALID_CREDENTIALS", "Invalid request credentials"),
    ctx: WRITE,
    kind: "permanent",
    code: "credential_rejected",
  },
  {
    name: "expired_token (lower case): credential rejected",
    outcome: err(401, "expired_token"),
    ctx: READ,
    kind: "permanent",
    code: "credential_rejected",
  },
  {
    name: "insufficient_scope: permanent",
    outcome: err(403, "insufficient_scope"),
    ctx: READ,
    kind: "permanent",
    code: "insufficient_scope",
  },
  {
    name: "crm.item ACCESS_DENIED with 400: permission denied",
    outcome: err(400, "ACCESS_DENIED", "Access denied."),
    ctx: WRITE,
    kind: "permanent",
    code: "permission_denied",
  },
  {
    name: "legacy empty code 'Access denied': permission denied",
    outcome: err(400, "", "Access denied"),
    ctx: WRITE,
    kind: "permanent",
    code: "permission_denied",
  },
  {
    name: "403 without a body: permission denied",
    outcome: { type: "reply", status: 403, body: null },
    ctx: READ,
    kind: "permanent",
    code: "permission_denied",
  },
  {
    name: "ERROR_METHOD_NOT_FOUND: permanent",
    outcome: err(404, "ERROR_METHOD_NOT_FOUND", "Method not found!"),
    ctx: READ,
    kind: "permanent",
    code: "method_not_found",
  },
  {
    name: "INVALID_REQUEST (Https required): permanent",
    outcome: err(400, "INVALID_REQUEST", "Https required."),
    ctx: READ,
    kind: "permanent",
    code: "invalid_request",
  },
  {
    name: "INVALID_ARG_VALUE (bad filter field): permanent",
    outcome: err(400, "INVALID_ARG_VALUE", "Invalid filter"),
    ctx: READ,
    kind: "permanent",
    code: "invalid_argument",
  },
  {
    name: "legacy 'ID is not defined or invalid.': permanent invalid argument",
    outcome: err(400, "", "ID is not defined or invalid."),
    ctx: READ,
    kind: "permanent",
    code: "invalid_argument",
  },
  {
    name: "legacy 'Parameter 'fields' must be array.': permanent invalid argument",
    outcome: {
      type: "command_error",
      entry: { error: "", error_description: "Parameter 'fields' must be array." },
    },
    ctx: WRITE,
    kind: "permanent",
    code: "invalid_argument",
  },
  {
    name: "ERROR_BATCH_LENGTH_EXCEEDED: permanent (our bug)",
    outcome: err(400, "ERROR_BATCH_LENGTH_EXCEEDED"),
    ctx: READ,
    kind: "permanent",
    code: "batch_rejected",
  },
  {
    name: "ERROR_BATCH_METHOD_NOT_ALLOWED inside a batch: permanent",
    outcome: {
      type: "command_error",
      entry: { error: "ERROR_BATCH_METHOD_NOT_ALLOWED", error_description: "" },
    },
    ctx: READ,
    kind: "permanent",
    code: "batch_rejected",
  },
  {
    name: "CREATE_DYNAMIC_ITEM_RESTRICTED (plan): permanent",
    outcome: err(400, "CREATE_DYNAMIC_ITEM_RESTRICTED"),
    ctx: WRITE,
    kind: "permanent",
    code: "plan_restricted",
  },
  {
    name: "unknown 400 code: permanent CRM refusal",
    outcome: err(400, "SOMETHING_NEW", "whatever"),
    ctx: WRITE,
    kind: "permanent",
    code: "crm_rejected",
  },
  {
    name: "plain-string result_error entry: classified by its text",
    outcome: { type: "command_error", entry: "Something odd happened" },
    ctx: READ,
    kind: "permanent",
    code: "crm_rejected",
  },
  {
    name: "bad parameters built by our code: permanent",
    outcome: { type: "invalid_data", code: "invalid_params" },
    ctx: WRITE,
    kind: "permanent",
    code: "invalid_argument",
  },
  // business
  {
    name: "legacy 'Not found' with empty code (crm.contact.get): business not_found",
    outcome: err(400, "", "Not found"),
    ctx: READ,
    kind: "business",
    code: "not_found",
  },
  {
    name: "legacy 'Contact is not found' with empty code (crm.contact.update): business not_found",
    outcome: { type: "command_error", entry: { error: "", error_description: "Contact is not found" } },
    ctx: WRITE,
    kind: "business",
    code: "not_found",
  },
  {
    name: "crm.item NOT_FOUND 'Element not found': business not_found",
    outcome: err(400, "NOT_FOUND", "Element not found"),
    ctx: READ,
    kind: "business",
    code: "not_found",
  },
  {
    name: "invalid phone: business",
    outcome: { type: "invalid_data", code: "invalid_phone" },
    ctx: WRITE,
    kind: "business",
    code: "invalid_phone",
  },
  {
    name: "unknown citizenship after a refresh: business",
    outcome: { type: "invalid_data", code: "unknown_citizenship" },
    ctx: READ,
    kind: "business",
    code: "unknown_citizenship",
  },
];

for (const row of ROWS) {
  test(`classify: ${row.name}`, (t) => {
    const c = classify(row.outcome, row.ctx);
    t.is(c.kind, row.kind);
    t.is(c.code, row.code);
    if (row.spendsAttempt !== undefined) t.is(c.spendsAttempt, row.spendsAttempt);
    if (row.check) t.true(row.check(c), JSON.stringify(c));
  });
}

test("every code is a fixed snake_case word, and every fixture row uses a listed code", (t) => {
  for (const code of FAILURE_CODES) t.regex(code, /^[a-z]+(_[a-z]+)*$/);
  for (const row of ROWS) t.true((FAILURE_CODES as readonly string[]).includes(row.code), row.code);
});

test("the code sets name only codes of this module, and agree with the kinds the classifier gives", (t) => {
  const known = new Set<string>([...FAILURE_CODES, ...HYDRATION_CODES]);
  for (const code of [...PORTAL_WIDE_CODES, ...BUSINESS_CODES, ...NOT_FOUND_CODES])
    t.true(known.has(code), code);
  // Every business verdict of the fixture table is a business stop or a missing Contact.
  for (const row of ROWS.filter((r) => r.kind === "business")) {
    t.true(BUSINESS_CODES.has(row.code) || NOT_FOUND_CODES.has(row.code), row.code);
  }
  // A portal-wide code is never a verdict on the command itself (permanent or business).
  for (const row of ROWS.filter((r) => isPortalWide(r.code)))
    t.true(["transient", "uncertain"].includes(row.kind));
  t.false(isPortalWide("not_found"));
});

test("the classification never carries the portal's description text", (t) => {
  const secretish = "Contact +79991234567 ivan@example.com is not found";
  const c = classify(err(400, "", secretish), READ);
  t.is(c.code, "not_found");
  t.false(JSON.stringify(c).includes("79991234567"));
  t.false(JSON.stringify(c).includes("ivan@"));
});

test("a Bitrix error code that is not a plain identifier is not echoed", (t) => {
  const c = classify(err(400, "weird code with spaces +79991234567"), READ);
  t.is(c.bitrixError, undefined);
  t.is(c.kind, "permanent");
  const known = classify(err(503, "QUERY_LIMIT_EXCEEDED"), READ);
  t.is(known.bitrixError, "QUERY_LIMIT_EXCEEDED");
  t.is(known.httpStatus, 503);
});
