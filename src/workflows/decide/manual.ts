// A person's decision for a parked contact.map_or_create (docs/admin.md, Parked workflows):
// bitrix_sync.resume_parked_workflow puts it in step_data.manual, the pass's first step reads it.
// Pure, unit-tested without a database. The parking codes are persisted: keep them.
import { type Candidate, decide, type Holdings } from "./candidates.js";

export type ManualDecision =
  /** Link this Contact instead of choosing among the phone's candidates. */
  | { decision: "link_contact"; contactId: number }
  /** Create a new Contact for the user. */
  | { decision: "create_contact" };

/** The decision stored in step_data.manual, or null (none, or not one this code knows). */
export function manualDecision(stepData: Record<string, unknown>): ManualDecision | null {
  const m = stepData.manual;
  if (m === null || typeof m !== "object") return null;
  const { decision, contact_id } = m as Record<string, unknown>;
  if (decision === "create_contact") return { decision };
  const id = Number(contact_id);
  if (decision === "link_contact" && Number.isSafeInteger(id) && id > 0) return { decision, contactId: id };
  return null;
}

export type ManualLinkDecision =
  /** The link cannot be made: the workflow parks again with this code, for another decision. */
  | { kind: "park"; code: "manual_link_not_found" | "manual_link_bound_to_other_user" }
  /** The Contact already carries this user: restore the mapping, fix the flag if needed. */
  | { kind: "restore"; contactId: number; fixFlag: boolean }
  /** Free, or held by an inactive user (whose link is taken over). */
  | { kind: "take"; contactId: number; previousUserId: string | null };

/**
 * After reading the Contact a person chose: the same rules as a phone candidate (./candidates.ts),
 * except that a Contact of another active user is never replaced by a new one behind the person's
 * back: the workflow asks again instead.
 */
export function decideManualLink(
  self: string,
  contactId: number,
  read: readonly Candidate[],
  h: Holdings,
): ManualLinkDecision {
  const c = read.find((x) => x.id === contactId);
  if (!c) return { kind: "park", code: "manual_link_not_found" };
  const d = decide(self, [c], h);
  switch (d.kind) {
    case "restore":
      return { kind: "restore", contactId: c.id, fixFlag: d.fixFlag };
    case "take":
      return { kind: "take", contactId: c.id, previousUserId: d.previousUserId };
    case "create":
      return { kind: "park", code: "manual_link_bound_to_other_user" };
  }
}
