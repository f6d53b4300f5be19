// The recovery of an uncertain contact.add (§7.2 uncertain -> reconcile), part of
// contact.map_or_create: the create may have landed, so the workflow searches for Contacts carrying
// the user's id (what the create wrote, whatever the App's phone is now) and reads the Contacts found
// before it decides; it never creates blindly. The create command is resolved
// (succeeded with the Contact found, or retry) in the same transaction as the decision.
import { afterRecoveryRead, candidatesOf, foundIds, recoveredBranch } from "../decide/map-or-create.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";
import { finalRead } from "./map-or-create.js";

/** Resolves the create command under recovery (step_data.recovering); returns its new status. */
async function resolveCreate(
  s: Step,
  outcome: "succeeded" | "retry" | "dead_letter",
  extra: { contactId?: number; code?: string } = {},
): Promise<string | undefined> {
  const id = s.sd.recovering;
  const { rows } = await s.tx.query<{ status: string }>(
    "select status from bitrix_sync.resolve_command_reconcile($1, $2, $3, $4, $5)",
    [
      id,
      s.wf.lease_token,
      outcome,
      extra.contactId === undefined ? null : JSON.stringify({ contact_id: extra.contactId, recovered: true }),
      extra.code ?? null,
    ],
  );
  delete s.sd.recovering;
  return rows[0]?.status;
}

/** Proved not applied: the same create command goes out again, unless it is past its horizon. */
async function resendCreate(s: Step): Promise<void> {
  if ((await resolveCreate(s, "retry")) !== "retry_wait") return await s.fail("retry_horizon_exceeded");
  return await s.event("await_crm", { current_step: "create_contact" });
}

async function searchFailed(s: Step, last: CommandRow): Promise<void> {
  await resolveCreate(s, "dead_letter", { code: "recovery_search_failed" });
  return await s.failWith(last, "recovery_search_failed");
}

async function recoverFind(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await searchFailed(s, last);
  const found = foundIds(s.response(last));
  if (found.length === 0) return await resendCreate(s);
  return await s.issue("contact.read", { ids: found, purpose: "candidates" }, "recover_read");
}

async function recoverRead(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await searchFailed(s, last);
  const d = afterRecoveryRead(s.wf.user_id, candidatesOf(s.response(last)));
  if (d.kind === "resend_create") return await resendCreate(s);
  await resolveCreate(s, "succeeded", { contactId: d.contactId });
  s.sd.contact = d.contactId;
  s.sd.branch = recoveredBranch(s.sd.branch);
  await s.openMapping(d.contactId);
  return await finalRead(s);
}

/** The steps of the create recovery, by the name persisted in current_step. */
export const createRecoverySteps: Readonly<Record<string, AfterStep>> = {
  // Back from waiting_retry once a late execution of the create would have landed.
  recover_search: (s) => s.issue("contact.find_by_user_id", {}, "recover_find"),
  recover_find: recoverFind,
  recover_read: recoverRead,
};
