// contact.rebind (§5.4), started by an admin's bitrix_sync.request_bitrix_contact_rebind: bind the
// target Contact to the user, clear the user from the previously linked Contact (read again right
// before every clear), then move the link, finish the request and resolve its alerts in one SQL
// call. However else the workflow ends, its request closes with it (the trigger
// _300_close_rebind_request, sql/rebind.sql), so a step only has to end the workflow. Step names
// and refusal codes are persisted: keep them.
import { type AppUser, isEligible } from "../../app-data.js";
import { candidatesOf } from "../decide/map-or-create.js";
import { handedBack, isNotFound } from "../decide/pass.js";
import {
  clearsPrevious,
  decideRebind,
  type RebindRequest,
  rebindReadIds,
  rebindTarget,
} from "../decide/rebind.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";

async function rebindRequest(s: Step): Promise<RebindRequest | null> {
  const { rows } = await s.tx.query<RebindRequest>(
    "select previous_contact_id, target_contact_id from bitrix_sync.rebind_requests where workflow_id = $1",
    [s.wf.id],
  );
  return rows[0] ?? null;
}

export async function startRebind(s: Step, user: AppUser | null): Promise<void> {
  const req = await rebindRequest(s);
  if (!req) return await s.fail("rebind_request_missing");
  if (!isEligible(user)) return await s.fail("user_not_eligible");
  await s.tx.query("select bitrix_sync.start_rebind_request($1, $2)", [s.wf.id, s.wf.lease_token]);
  return await s.issue("contact.read", { ids: rebindReadIds(req), purpose: "candidates" }, "rebind_read");
}

/** The target is held by another active user: a business alert for a person, and the rebind fails. */
async function targetTaken(s: Step, req: RebindRequest, targetId: number): Promise<void> {
  await s.alert({
    type: "contact_bound_to_other_user",
    userId: s.wf.user_id,
    currentContactId: req.previous_contact_id,
    selectedContactId: targetId,
    details: { source: "rebind" },
  });
  return await s.fail("target_bound_to_other_user");
}

async function afterRebindRead(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const req = await rebindRequest(s);
  if (!req) return await s.fail("rebind_request_missing");
  const read = candidatesOf(s.response(last));
  const target = rebindTarget(req, read);
  if (!target) return await s.fail("target_not_found");
  const d = decideRebind(s.wf.user_id, req, read, target, await s.holdings([target]));
  if (d.kind === "refuse") return await targetTaken(s, req, target.id);
  s.sd.contact = d.contactId;
  s.sd.clear_previous = d.clearPrevious;
  return await s.issue(
    "contact.update",
    { contact_id: d.contactId, set_user: "self", registered: true },
    "rebind_target",
  );
}

/** Reads the previous Contact again: whether to clear it is decided from what it holds now. */
async function checkPrevious(s: Step): Promise<void> {
  const prev = s.sd.clear_previous as number | null | undefined;
  if (!prev) return await finishRebind(s);
  return await s.issue("contact.read", { ids: [prev], purpose: "candidates" }, "rebind_check_previous");
}

async function afterCheckPrevious(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const prev = s.sd.clear_previous as number;
  if (!clearsPrevious(s.wf.user_id, prev, candidatesOf(s.response(last)))) return await finishRebind(s);
  return await s.issue(
    "contact.update",
    // A failed clear is handed back instead of resent (bitrix_sync.retry_command): it is read again first.
    { contact_id: prev, set_user: "clear", registered: false, reread_before_retry: true },
    "rebind_clear_previous",
  );
}

async function afterClearPrevious(s: Step, last: CommandRow): Promise<void> {
  if (last.status === "succeeded" || isNotFound(last)) return await finishRebind(s);
  // The clear may have landed: the previous Contact is read again once a late execution would have
  // landed, and what it holds then decides, not a blind resend (../decide/unanswered-write.ts).
  if (last.status === "uncertain") return await s.unanswered(last);
  if (handedBack(last)) {
    // §5.4: the workflow waits (waiting_retry), the new link is not active yet; the retry reads first.
    return await s.retryLater(
      last.last_error_code ?? "clear_failed",
      s.response(last).retry_at,
      "rebind_recheck_previous",
    );
  }
  return await s.failWith(last);
}

/** Both Contacts updated: move the link, finish the request and resolve the alerts in one call. */
async function finishRebind(s: Step): Promise<void> {
  const req = await rebindRequest(s);
  if (!req) return await s.fail("rebind_request_missing");
  // Another user may have been linked to the target since the first read; complete_rebind would
  // refuse (BS006) and the step would only be retried, so this ends the rebind at once.
  const { rows } = await s.tx.query(
    "select 1 from bitrix_sync.entity_external_mapping where external_id = $1 and status = 'active' and entity_id <> $2",
    [req.target_contact_id, s.wf.user_id],
  );
  if (rows.length > 0) return await targetTaken(s, req, Number(req.target_contact_id));
  await s.tx.query("select bitrix_sync.complete_rebind($1, $2)", [s.wf.id, s.wf.lease_token]);
  return await s.succeed("rebound");
}

/** The steps of contact.rebind, by the name persisted in current_step. */
export const rebindSteps: Readonly<Record<string, AfterStep>> = {
  rebind_read: afterRebindRead,
  rebind_target: (s, last) => s.afterWrite(last, () => checkPrevious(s)),
  rebind_check_previous: afterCheckPrevious,
  rebind_clear_previous: afterClearPrevious,
  // Back from waiting_retry after a handed-back or unanswered clear: the last command is that clear;
  // read first.
  rebind_recheck_previous: (s) => checkPrevious(s),
};
