// What contact.map_or_create (§5.1) decides from each read, apart from the candidate branch
// (./candidates.ts): pure functions of the safe projections that src/workflows/command-payloads.ts stores,
// unit-tested without a database. Outcome codes are persisted (workflow_instances.outcome): keep them.
import { MAX_PHONES_PER_SEARCH } from "../../crm/catalogue.js";
import type { Candidate } from "./candidates.js";

/** The Contact IDs of a phone search's projection. */
export function foundIds(response: Record<string, unknown>): number[] {
  return ((response.contact_ids as number[] | undefined) ?? []).map(Number);
}

/** The candidates of a read's projection (purpose candidates). */
export function candidatesOf(response: Record<string, unknown>): Candidate[] {
  const list = (response.contacts as Array<Record<string, unknown>> | undefined) ?? [];
  return list.map((c) => ({
    id: Number(c.id),
    userId: typeof c.user_id === "string" ? c.user_id : null,
    registered: typeof c.registered === "boolean" ? c.registered : null,
    createdAt: typeof c.created_at === "string" ? c.created_at : null,
  }));
}

export type SearchDecision =
  /** B0: nothing found, create a Contact. */
  | { kind: "create" }
  /** As many IDs as the portal returns at most: the newest may be missing, a person decides. */
  | { kind: "too_many"; ids: number[] }
  /** Read the candidates by ID, then choose (./candidates.ts). */
  | { kind: "read"; ids: number[] };

/** After the search by phone (step find_by_phone). */
export function afterPhoneSearch(ids: number[]): SearchDecision {
  if (ids.length === 0) return { kind: "create" };
  // The portal answers at most 20 IDs, the oldest ones: no choice made from this list is safe
  // (docs/workflows.md).
  if (ids.length >= MAX_PHONES_PER_SEARCH) return { kind: "too_many", ids };
  return { kind: "read", ids };
}

export type MappedReadDecision =
  /** The mapped Contact is gone: break the link, search by phone. */
  | { kind: "search_again" }
  /** The Contact carries another user_id: alert, outcome user_id_mismatch. */
  | { kind: "user_id_mismatch" }
  /** Linked, but the registration flag is off or the user id was emptied: set both (step restore_flag). */
  | { kind: "restore_flag" }
  | { kind: "succeed"; outcome: "already_mapped" };

/** After reading the Contact of the active mapping (step read_mapped; projection of purpose apply). */
export function afterReadMapped(response: Record<string, unknown>): MappedReadDecision {
  if (response.found === false) return { kind: "search_again" };
  if (response.user_id_matches === false) return { kind: "user_id_mismatch" };
  if (response.registered !== true || response.user_id_empty === true) return { kind: "restore_flag" };
  return { kind: "succeed", outcome: "already_mapped" };
}

export type FinalReadDecision =
  /** The Contact vanished after it was chosen: break the link, outcome contact_missing. */
  | { kind: "contact_missing" }
  | { kind: "user_id_mismatch" }
  /** mapped_held: linked by phone alone, its CRM-master fields held back (sql/held_links.sql). */
  | { kind: "succeed"; outcome: "restored" | "mapped" | "mapped_held" };

/** After the read that applies the chosen Contact to the App (step final_read). */
export function afterFinalRead(
  response: Record<string, unknown>,
  branch: string | undefined,
): FinalReadDecision {
  if (response.found === false) return { kind: "contact_missing" };
  if (response.user_id_matches === false) return { kind: "user_id_mismatch" };
  if (response.held === true) return { kind: "succeed", outcome: "mapped_held" };
  return { kind: "succeed", outcome: (branch ?? "mapped") === "restore" ? "restored" : "mapped" };
}

export type RecoveryDecision =
  /** The create did not land: send the same create command again. */
  | { kind: "resend_create" }
  /** The create landed: this is its Contact. */
  | { kind: "recovered"; contactId: number };

/**
 * After an uncertain create, from the Contacts found by phone and read back (step recover_read):
 * the newest one carrying this user is the create that landed (§7.2, never a blind second create).
 */
export function afterRecoveryRead(self: string, candidates: readonly Candidate[]): RecoveryDecision {
  const mine = candidates.filter((c) => c.userId === self).sort((a, b) => b.id - a.id)[0];
  return mine ? { kind: "recovered", contactId: mine.id } : { kind: "resend_create" };
}

/** The branch label after a recovered create: the branch that created it, marked as recovered. */
export function recoveredBranch(branch: string | undefined): string {
  return `${branch ?? "B0"}+recovered`;
}
