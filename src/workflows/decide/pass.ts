// The rules every workflow's step follows (§7.1; docs/workflows.md, "Guarantees": one workflow per user, restarted for the newest intent), as
// pure functions so they are unit-tested without a database: when a newer intent restarts the pass,
// and which failed commands are business problems for a person rather than technical failures (the
// codes are src/crm/classify.ts's).
import { BUSINESS_CODES, NOT_FOUND_CODES } from "../../crm/classify.js";

/**
 * Steps whose pending outcome is a read: a newer intent may restart the pass there. No contact.rebind
 * step is one: an App intent never joins a rebind, it is held until the rebind ends
 * (start_or_join_workflow), so a rebind's pass never restarts as another intent.
 */
export const READ_STEPS: ReadonlySet<string> = new Set([
  "start",
  "manual",
  "read_mapped",
  "find_by_phone",
  "read_candidates",
  "manual_link_read",
  "read_for_update",
  "final_read",
]);

/** Where a pass stands against the workflow's newest intent. */
export interface PassState {
  /** The revision the current pass works towards (step_data.pass), if a pass has started. */
  pass: number | undefined;
  /** The workflow's newest revision. */
  revision: number;
  /** A write of this workflow is uncertain or being reconciled: its outcome is not known yet. */
  unresolvedWrite: boolean;
}

/** A newer intent joined after the current pass started. */
export function behindNewestIntent(p: Pick<PassState, "pass" | "revision">): boolean {
  return (p.pass ?? 0) < p.revision;
}

/**
 * At the start of a step: the pass starts again for the newest intent, between read steps only and
 * never while a write is unresolved (its outcome must be known first).
 */
export function restartsBeforeStep(p: PassState & { step: string }): boolean {
  return behindNewestIntent(p) && !p.unresolvedWrite && READ_STEPS.has(p.step);
}

/**
 * When the pass would finish (succeed or fail): a newer intent that joined while it ran gets a pass
 * of its own instead, or that intent would be lost. Nothing may be left unresolved.
 */
export function restartsInsteadOfFinishing(p: PassState): boolean {
  return behindNewestIntent(p) && !p.unresolvedWrite;
}

/** The last command's outcome as a step sees it. */
export interface LastOutcome {
  status: string;
  last_error_code: string | null;
}

/**
 * A write the pump handed back to its workflow instead of sending it again as it was
 * (params.reread_before_retry, bitrix_sync.retry_command): the workflow waits, reads, then decides.
 */
export function handedBack(last: { status: string; response: Record<string, unknown> | null }): boolean {
  return last.status === "dead_letter" && last.response?.retry_by_workflow === true;
}

/** The command failed because its Contact does not exist. */
export function isNotFound(last: Pick<LastOutcome, "last_error_code">): boolean {
  return (NOT_FOUND_CODES as ReadonlySet<string>).has(last.last_error_code ?? "");
}

export type BusinessStop =
  /** The user is no longer eligible: the workflow has nothing to do (outcome not_eligible). */
  | { kind: "not_eligible" }
  /** A person must fix the App's data: an alert of this type, then waiting_manual with the code. */
  | {
      kind: "manual";
      code: "invalid_phone" | "unknown_citizenship";
      alert: "invalid_phone" | "unknown_citizenship";
    };

/** A command dead-lettered for a business reason stops the pass, whatever step was waiting for it. */
export function businessStop(last: LastOutcome): BusinessStop | null {
  if (
    last.status !== "dead_letter" ||
    !(BUSINESS_CODES as ReadonlySet<string>).has(last.last_error_code ?? "")
  )
    return null;
  if (last.last_error_code === "user_not_eligible") return { kind: "not_eligible" };
  const code = last.last_error_code === "invalid_phone" ? "invalid_phone" : "unknown_citizenship";
  return { kind: "manual", code, alert: code };
}
