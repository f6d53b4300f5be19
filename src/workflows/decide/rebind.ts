// What contact.rebind (§5.4) decides from its reads, as pure functions unit-tested without a
// database. Refusal codes are persisted (rebind_requests.failure_code, workflow outcome).
import { activeHolder, type Candidate, type Holdings } from "./candidates.js";

/** The admin's request, as bitrix_sync.rebind_requests holds it. */
export interface RebindRequest {
  previous_contact_id: string | null;
  target_contact_id: string;
}

/** The Contacts the rebind reads first: the target, then the previously linked one if any. */
export function rebindReadIds(req: RebindRequest): number[] {
  return [
    Number(req.target_contact_id),
    ...(req.previous_contact_id ? [Number(req.previous_contact_id)] : []),
  ];
}

/** The target among the Contacts read; none means the target does not exist (target_not_found). */
export function rebindTarget(req: RebindRequest, read: readonly Candidate[]): Candidate | undefined {
  return read.find((c) => String(c.id) === req.target_contact_id);
}

export type RebindDecision =
  /** Another active user holds the target (through a mapping or its user_id field): refused. */
  | { kind: "refuse"; code: "target_bound_to_other_user" }
  /**
   * Bind the target to this user; then, when the previous Contact carried this user at the first
   * read, check it again and clear it (null: nothing to clear).
   */
  | { kind: "bind"; contactId: number; clearPrevious: number | null };

/**
 * The rebind's check of the target (§5.4 worker step 2: it must not carry another active user,
 * whether through a mapping or through its user_id field) and of the previous Contact.
 */
export function decideRebind(
  self: string,
  req: RebindRequest,
  read: readonly Candidate[],
  target: Candidate,
  h: Holdings,
): RebindDecision {
  if (activeHolder(target, self, h) !== null) {
    return { kind: "refuse", code: "target_bound_to_other_user" };
  }
  const previous = req.previous_contact_id
    ? read.find((c) => String(c.id) === req.previous_contact_id)
    : undefined;
  return {
    kind: "bind",
    contactId: target.id,
    clearPrevious: previous?.userId === self ? previous.id : null,
  };
}

/**
 * §5.4 step 4, decided from a fresh read right before every clear (the first one and each retry):
 * the previous Contact is cleared only while it still carries this user.
 */
export function clearsPrevious(self: string, previousId: number, read: readonly Candidate[]): boolean {
  return read.find((c) => c.id === previousId)?.userId === self;
}
