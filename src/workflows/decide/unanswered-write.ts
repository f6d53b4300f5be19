// A CRM write that got no answer (§7.2 uncertain): what happens next, decided here only.
//
// A write becomes uncertain when it was sent and no usable reply came: a timeout or a lost
// connection after the request left, a reply that is not JSON, a 5xx other than the portal's
// refusals before execution (QUERY_LIMIT_EXCEEDED, OPERATION_TIME_LIMIT, OVERLOAD_LIMIT are
// transient and retried by the pump, src/crm/classify.ts). It may have landed, so it is never resent
// blindly:
// - a create (contact.add) is searched for by the user id it wrote (recover_search, create-recovery.ts);
// - a write that is not idempotent (a phone appended, a clear the workflow reads first) is superseded
//   and the Contact read again (reread_for_update, rebind_recheck_previous);
// - an idempotent write (a flag, a user id, a phone overwritten by its entry ID) goes out again
//   (resend_write).
// Each of the three waits first for the later of: the moment a late execution of the write would
// have landed (twice the unanswered time again), and the command's backoff for the attempts it
// spent (src/crm/backoff.ts, as every retry). So a plain 503 on a contact.update (answered at once,
// may hide a commit) is resent with a growing, jittered delay, not every two response times; the
// horizon (retry.horizon_sec from the first send) ends it with retry_horizon_exceeded (docs/decisions.md).

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
}

export type UnansweredDecision =
  | {
      action: UnansweredAction;
      /** The step the workflow comes back to (after waiting in waiting_retry, awaiting_late_write). */
      resumeStep: string;
      /** The earliest moment it comes back. */
      at: Date;
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
 * the command became uncertain (the client's deadline, or the lease expiry of a sender that died).
 */
export function lateWriteSettledAt(sentAt: Date | null, givenUpAt: Date): Date {
  const unanswered = sentAt ? Math.max(0, givenUpAt.getTime() - sentAt.getTime()) : 0;
  return new Date(givenUpAt.getTime() + 2 * unanswered);
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
 */
export function decideUnansweredWrite(w: UnansweredWrite, backoffMs: number): UnansweredDecision {
  const settled = lateWriteSettledAt(w.sentAt, w.givenUpAt).getTime();
  const at = new Date(Math.max(settled, w.givenUpAt.getTime() + Math.max(0, backoffMs)));
  if (w.commandType === "contact.add") return { action: "search", resumeStep: "recover_search", at };
  if (isIdempotentWrite(w.commandType, w.params)) return { action: "resend", resumeStep: "resend_write", at };
  const reread = Object.hasOwn(REREAD_STEP, w.step) ? REREAD_STEP[w.step] : undefined;
  if (!reread) return { action: "fail", code: "unknown_step" };
  return { action: "reread", resumeStep: reread, at };
}
