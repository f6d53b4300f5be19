// The robot webhook receivers' names (§10.1): configuration (a token each), metric labels and the
// value of webhook_inbox.receiver. A leaf module, so the inbox, its configuration and the metrics
// share it without importing each other.

/** The two receivers; also the value of webhook_inbox.receiver. */
export type ReceiverName = "contact" | "alert";
export const RECEIVERS: readonly ReceiverName[] = ["contact", "alert"];
