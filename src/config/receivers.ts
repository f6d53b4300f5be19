// The robot webhook receivers' names (§10.1): configuration (a token each), metric labels and the
// value of webhook_inbox.receiver; and the size limits of a robot request, which the public nginx
// (./nginx.ts) may only make stricter. A leaf module, so the inbox, its configuration, the metrics
// and the nginx renderer share it without importing each other.

/** The two receivers; also the value of webhook_inbox.receiver. */
export type ReceiverName = "contact" | "alert";
export const RECEIVERS: readonly ReceiverName[] = ["contact", "alert"];

/** A robot body is about 300 bytes; 8 KiB leaves room for long portal host names. */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024;
/** `token` (a 64-character hex secret, or a longer one) plus `ID`. */
export const DEFAULT_MAX_QUERY_BYTES = 1024;
