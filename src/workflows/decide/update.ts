// What contact.update (§5.2) decides from the read of the linked Contact, as pure functions unit-tested
// without a database. The phone rule works on hashes (planPhoneUpdate): no number is stored, the
// pump writes the App's number at send time.
import { planPhoneUpdate } from "../../crm/contact-fields.js";

/** A Contact as the read of purpose phones projects it (src/workflows/command-payloads.ts). */
export interface PhonesRead {
  id: number;
  user_id?: unknown;
  registered?: unknown;
  phones?: Array<{ id: number | null; type?: string; hash: string }>;
}

export type UpdateReadCheck =
  /** The linked Contact is gone: break the link, outcome contact_missing. */
  | { kind: "contact_missing" }
  /** The Contact carries another user_id: alert, outcome user_id_mismatch. */
  | { kind: "user_id_mismatch"; contactId: number }
  | { kind: "ours"; contact: PhonesRead };

/** Step read_for_update: is the Contact read still this user's? */
export function checkUpdateRead(self: string, response: Record<string, unknown>): UpdateReadCheck {
  const c = ((response.contacts as PhonesRead[] | undefined) ?? [])[0];
  if (!c) return { kind: "contact_missing" };
  // Another user's id is a conflict for a person; an emptied one is written back (planContactUpdate).
  if (c.user_id !== self && c.user_id !== null) return { kind: "user_id_mismatch", contactId: c.id };
  return { kind: "ours", contact: c };
}

export type UpdatePlan =
  | { kind: "succeed"; outcome: "no_change" }
  /** The safe parameters of the contact.update command (step update_contact). */
  | { kind: "update"; params: Record<string, unknown> };

/**
 * The hash the plan looks for among the Contact's entries: the entry's own hash when it is the App's
 * phone in whatever form it was stored (a read stored by an older process holds an older form,
 * src/hash.ts), else `fresh`, the phone's hash in today's form. Without it, the App's phone, already
 * on the Contact, would be appended again.
 */
export function desiredPhoneHash(
  c: PhonesRead,
  isAppPhone: (hash: string) => boolean,
  fresh: string,
): string {
  return (c.phones ?? []).find((p) => isAppPhone(p.hash))?.hash ?? fresh;
}

/**
 * The update of a Contact that is this user's: the phone entry to overwrite or append (on hashes:
 * the App's phone, and the one this service wrote last), an emptied user id and the registration
 * flag, or nothing.
 */
export function planContactUpdate(
  c: PhonesRead,
  desiredPhoneHash: string,
  previousPhoneHash: string | null | undefined,
): UpdatePlan {
  const params: Record<string, unknown> = { contact_id: c.id };
  const plan = planPhoneUpdate(
    (c.phones ?? []).map((p) => ({ id: p.id, valueType: p.type ?? "", value: p.hash })),
    desiredPhoneHash,
    previousPhoneHash,
  );
  if (plan) params.phone = "entryId" in plan ? { entry_id: plan.entryId, value_type: plan.valueType } : plan;
  if (c.user_id === null) params.set_user = "self";
  if (c.registered !== true) params.registered = true;
  if (Object.keys(params).length === 1) return { kind: "succeed", outcome: "no_change" };
  return { kind: "update", params };
}
