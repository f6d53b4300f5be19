// Every way a receiver refuses a request (§10.1, docs/receivers.md): per HTTP status, the error codes
// its JSON body may carry and the reasons (the `reason` label of bitrix_sync_webhook_rejected_total
// and of the log line) that lead to it. The routes can only answer what is listed here (their
// reply() is typed by this table) and docs/openapi.json is generated from it, so the two agree.

export const RECEIVER_REFUSALS = {
  400: {
    errors: ["bad_request"],
    description: "The request is not the robot's: query, form or document do not match the contract.",
    reasons: [
      "query_encoding",
      "query_unexpected",
      "id_missing",
      "body_unreadable",
      "body_encoding",
      "body_too_many_fields",
      "body_unexpected_field",
      "body_duplicate_field",
      "body_missing_field",
      "document_type",
      "document_id",
      "id_mismatch",
      "entity_type",
      "entity_id",
    ],
  },
  403: {
    errors: ["forbidden"],
    description: "The query token, or the portal's domain or member ID, is not the configured one.",
    reasons: ["token_missing", "token_invalid", "portal_domain", "portal_member"],
  },
  405: {
    errors: ["method_not_allowed"],
    description: "Only POST is allowed (the answer carries `Allow: POST`).",
    reasons: ["method_not_allowed"],
  },
  413: {
    errors: ["payload_too_large"],
    description: "The body is larger than the receiver accepts (8 KiB by default).",
    reasons: ["body_too_large"],
  },
  414: {
    errors: ["uri_too_long"],
    description: "The query string is longer than the receiver accepts (1 KiB by default).",
    reasons: ["query_too_large"],
  },
  415: {
    errors: ["unsupported_media_type"],
    description: "The body is not `application/x-www-form-urlencoded` (optionally `; charset=utf-8`).",
    reasons: ["unsupported_media_type"],
  },
  503: {
    errors: ["unavailable", "receiver_not_configured"],
    description:
      "Nothing was recorded: the receiver is not configured (no token, no portal identity, or for the alert receiver no valid alert settings), or the database is unavailable, slow or saturated. The robot does not retry; reconciliation repairs the change.",
    reasons: [
      "not_configured",
      "alert_entity_type_unset",
      "alert_config_invalid",
      "unknown_receiver",
      "database_timeout",
      "database_unavailable",
      "queue_full",
      "queue_wait",
    ],
  },
} as const;

type Table = typeof RECEIVER_REFUSALS;
export type RefusalStatus = keyof Table;
/** The reasons that may lead to `S`. */
export type ReasonOf<S extends RefusalStatus> = Table[S]["reasons"][number];
/** The error codes a body of status `S` may carry. */
export type ErrorOf<S extends RefusalStatus> = Table[S]["errors"][number];
