// What the public nginx and the service agree on for nginx's own refusals (§10.1, §15): the internal
// route nginx hands a refusal to, its two headers, the reasons with the status and page the client
// gets, and the receiver labels. A leaf module: the renderer (./nginx.ts) writes it into
// the configuration, the route (src/inbound/edge.ts) reads it, so the two cannot drift.

/** Where nginx hands its refusals; internal, not in docs/openapi.json (only the proxy calls it). */
export const EDGE_REFUSAL_PATH = "/internal/edge/v1/refusal";
/** The refusal's reason, as nginx names it. */
export const EDGE_REASON_HEADER = "x-bitrix-sync-refusal";
/** The receiver route of the refused request: contact, alert, or none for any other path. */
export const EDGE_RECEIVER_HEADER = "x-bitrix-sync-receiver";

/**
 * nginx's refusals that reach the service, and the status and body the client got for each (the
 * route answers the same, so a proxy that passed it through would change nothing for the client).
 */
export const EDGE_REFUSALS = {
  source_ip: { status: 403, error: "forbidden" },
  method_not_allowed: { status: 403, error: "forbidden" },
  not_found: { status: 404, error: "not_found" },
  body_too_large: { status: 413, error: "payload_too_large" },
  rate_limited: { status: 429, error: "too_many_requests" },
} as const;
export type EdgeReason = keyof typeof EDGE_REFUSALS;
export const EDGE_REASONS = Object.keys(EDGE_REFUSALS) as EdgeReason[];

/** The receiver label of an edge refusal: a robot route, or none. */
export const EDGE_RECEIVERS = ["contact", "alert", "none"] as const;
export type EdgeReceiver = (typeof EDGE_RECEIVERS)[number];
