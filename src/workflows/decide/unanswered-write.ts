// A CRM write that got no answer (§7.2 uncertain): what happens next, decided here only.
//
// A write becomes uncertain when it was sent and no usable reply came: a timeout or a lost
// connection after the request left, a reply that is not JSON, a 5xx other than the portal's
// refusals before execution (QUERY_LIMIT_EXCEEDED, OPERATION_TIME_LIMIT, OVERLOAD_LIMIT are
// transient and retried by the pump, src/crm/classify.ts); or when its holder lost track of it: the
// lease of a sender that died (or could not record the reply while the database was away) expired
// with the request in flight, or a create was recorded before the process started. It may have
// landed, so it is never resent blindly:
// - a create (contact.add) is searched for by the user id it wrote (recover_search, create-recovery.ts);
// - a write that is not idempotent (a phone appended, a clear the workflow reads first) is superseded
//   and the Contact read again (reread_for_update, rebind_recheck_previous);
// - an idempotent write (a flag, a user id, a phone overwritten by its entry ID) goes out again
//   (resend_write).
//
// Each of the three first waits until a late execution of the write would have landed
// (lateWriteSettledAt): a slow portal may still execute a request after the client gave up, so the
// wait is twice as long again as the request went unanswered. The unanswered time ends when the
// command became uncertain, or at the reply deadline recorded with its send marker
// (crm_commands.reply_deadline_at: the sender's send window plus its HTTP timeout,
// src/workflows/pump.ts) when that comes first: no request is still out after it, however late the
// holder's lease expired. So a create whose reply a database restart lost is searched for as soon
// as the claim after its lease's end makes it uncertain (and never sooner than
// 3 × (2 s + BITRIX_SYNC_HTTP_TIMEOUT_SEC) after its send), not twice the lease later (issue 36:
// 173–177 s with the default minute).
//
// When the portal is what did not answer, the wait also lasts the command's backoff for the attempts
// it spent (src/crm/backoff.ts, as every retry), whichever ends later: a plain 503 on a
// contact.update (answered at once, may hide a commit) is resent with a growing, jittered delay, not
// every two response times. When the holder lost track of it (HOLDER_LOST_CODES) the portal may well
// have answered, and the outage was the service's: no backoff is added. The wait keeps the moment the
// late execution settles (settledAt, step_data.late_write_settles_at): when the portal answers again
// after failing as a whole, the backoff part is dropped and the workflow comes back then
// (bring_forward_commands, docs/workflows.md "Recovery after a portal outage").
//
// Two deadlines end it, each with retry_horizon_exceeded (docs/decisions.md), both retry.horizon_sec
// plus any paused time (sql/retry/deadline.sql):
// - the command's, crm_commands.deadline_at, counted from its first send (first_sent_at): a resend
//   past it is dead-lettered by resolve_command_reconcile (sql/commands/reconcile.sql), and the step fails;
// - the workflow's, workflow_instances.deadline_at, counted from its creation or last requeue: a wait
//   (awaiting_late_write) that would end past it fails the workflow and dead-letters it instead
//   (schedule_workflow_retry, sql/workflows/retry.sql).

/** What the workflow does with a write that got no answer. */
export type UnansweredAction = "resend" | "reread" | "search";

/** The unanswered command as the step sees it. */
export interface UnansweredWrite {
  /** The step that issued the write and waits for it (workflow_instances.current_step). */
  step: string;
  commandType: string;
  params: Record<string, unknown>;
  /** The send marker; null when it was never sent (a holder that died before sending). */
  sentAt: Date | null;
  /** When the command became uncertain (the client gave up, or the sender's lease expired). */
  givenUpAt: Date;
  /**
   * The reply deadline recorded with the send marker (crm_commands.reply_deadline_at): the request
   * was out and given up by then at the latest. Null when the sender did not record one.
   */
  replyDeadlineAt: Date | null;
  /** Why it became uncertain: the command's last_error_code (a classifier code, or HOLDER_LOST_CODES). */
  code: string | null;
}

/**
 * Codes of a command that became uncertain because its holder lost track of it, not because the
 * portal failed to answer: the sender's lease expired with the request in flight (sql/commands/claim.sql),
 * or a create was recorded before the process started (src/workflows/pump.ts). No backoff is added
 * to their wait.
 */
export const HOLDER_LOST_CODES: ReadonlySet<string> = new Set([
  "lease_expired_in_flight",
  "issued_before_start",
]);

export type UnansweredDecision =
  | {
      action: UnansweredAction;
      /** The step the workflow comes back to (after waiting in waiting_retry, awaiting_late_write). */
      resumeStep: string;
      /** The earliest moment it comes back. */
      at: Date;
      /**
       * When a late execution can no longer land (lateWriteSettledAt): `at` less the backoff. When
       * the portal answers again, the wait is cut to this (bring_forward_commands), never below.
       */
      settledAt: Date;
    }
  /** A non-idempotent write at a step that has no read to come back to: a programming error. */
  | { action: "fail"; code: "unknown_step" };

/** The step that reads again after a non-idempotent write of `step` went unanswered. */
const REREAD_STEP: Readonly<Record<string, string>> = {
  rebind_clear_previous: "rebind_recheck_previous",
  update_contact: "reread_for_update",
};

/**
 * When a write that got no answer can no longer land: the portal may still be executing it after the
 * client gave up (a slow portal finishes late), so a read that decides from the Contact waits until
 * twice as long again as the request went unanswered. `sentAt` is the send marker, `givenUpAt` when
 * the command became uncertain (the client's deadline, or the lease expiry of a sender that lost
 * it), `replyDeadlineAt` the reply deadline recorded with the marker: the unanswered time ends at the
 * earlier of the two.
 */
export function lateWriteSettledAt(
  sentAt: Date | null,
  givenUpAt: Date,
  replyDeadlineAt: Date | null = null,
): Date {
  const end = Math.min(givenUpAt.getTime(), replyDeadlineAt?.getTime() ?? Number.POSITIVE_INFINITY);
  const unanswered = sentAt ? Math.max(0, end - sentAt.getTime()) : 0;
  return new Date(end + 2 * unanswered);
}

/** Sending it again cannot append, duplicate or undo anything a newer write did. */
function isIdempotentWrite(commandType: string, params: Record<string, unknown>): boolean {
  if (commandType !== "contact.update") return false;
  if (params.reread_before_retry === true) return false;
  const phone = params.phone as { entry_id?: unknown } | undefined;
  return !phone || typeof phone.entry_id === "number";
}

/**
 * The one decision after a write got no answer. `backoffMs` is the command's retry delay for the
 * attempts it spent (retryDelayMs of src/crm/backoff.ts); the caller draws it, so this stays pure.
 * It is not waited for when the holder lost track of the write (HOLDER_LOST_CODES).
 */
export function decideUnansweredWrite(w: UnansweredWrite, backoffMs: number): UnansweredDecision {
  const settledAt = lateWriteSettledAt(w.sentAt, w.givenUpAt, w.replyDeadlineAt);
  const backoff = w.code !== null && HOLDER_LOST_CODES.has(w.code) ? 0 : Math.max(0, backoffMs);
  const at = new Date(Math.max(settledAt.getTime(), w.givenUpAt.getTime() + backoff));
  if (w.commandType === "contact.add")
    return { action: "search", resumeStep: "recover_search", at, settledAt };
  if (isIdempotentWrite(w.commandType, w.params)) {
    return { action: "resend", resumeStep: "resend_write", at, settledAt };
  }
  const reread = Object.hasOwn(REREAD_STEP, w.step) ? REREAD_STEP[w.step] : undefined;
  if (!reread) return { action: "fail", code: "unknown_step" };
  return { action: "reread", resumeStep: reread, at, settledAt };
}
