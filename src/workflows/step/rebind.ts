// contact.rebind (§5.4), started by an admin's bitrix_sync.request_bitrix_contact_rebind: bind the
// target Contact to the user, clear the user from the previously linked Contact, then move the link,
// finish the request and resolve its alerts in one SQL call. Step names and refusal codes are
// persisted: keep them.
import { type AppUser, isEligible } from "../../app-data.js";
import { candidatesOf } from "../decide/map-or-create.js";
import { isNotFound } from "../decide/pass.js";
import { decideRebind, type RebindRequest, rebindReadIds, rebindTarget } from "../decide/rebind.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";

async function rebindRequest(s: Step): Promise<(RebindRequest & { id: string }) | null> {
  const { rows } = await s.tx.query<RebindRequest & { id: string }>(
    "select id, previous_contact_id, target_contact_id from bitrix_sync.rebind_requests where workflow_id = $1",
    [s.wf.id],
  );
  return rows[0] ?? null;
}

async function failRebind(s: Step, code: string): Promise<void> {
  await s.tx.query("select bitrix_sync.fail_rebind_request($1, $2, $3)", [s.wf.id, s.wf.lease_token, code]);
  return await s.fail(code);
}

export async function startRebind(s: Step, user: AppUser | null): Promise<void> {
  const req = await rebindRequest(s);
  if (!req) return await s.fail("rebind_request_missing");
  if (!isEligible(user)) return await failRebind(s, "user_not_eligible");
  await s.tx.query("select bitrix_sync.start_rebind_request($1, $2)", [s.wf.id, s.wf.lease_token]);
  return await s.issue("contact.read", { ids: rebindReadIds(req), purpose: "candidates" }, "rebind_read");
}

async function afterRebindRead(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await failRebind(s, last.last_error_code ?? "command_failed");
  const req = await rebindRequest(s);
  if (!req) return await s.fail("rebind_request_missing");
  const read = candidatesOf(s.response(last));
  const target = rebindTarget(req, read);
  if (!target) return await failRebind(s, "target_not_found");
  const d = decideRebind(s.wf.user_id, req, read, target, await s.holdings([target]));
  if (d.kind === "refuse") return await failRebind(s, d.code);
  s.sd.contact = d.contactId;
  s.sd.clear_previous = d.clearPrevious;
  return await s.issue(
    "contact.update",
    { contact_id: d.contactId, set_user: "self", registered: true },
    "rebind_target",
  );
}

async function clearPrevious(s: Step): Promise<void> {
  const prev = s.sd.clear_previous as number | null | undefined;
  if (!prev) return await finishRebind(s);
  return await s.issue(
    "contact.update",
    { contact_id: prev, set_user: "clear", registered: false },
    "rebind_clear_previous",
  );
}

async function afterClearPrevious(s: Step, last: CommandRow): Promise<void> {
  if (last.status === "succeeded" || isNotFound(last)) return await finishRebind(s);
  return await s.afterWrite(last, () => finishRebind(s));
}

/** Both Contacts updated: move the link, finish the request and resolve the alerts in one call. */
async function finishRebind(s: Step): Promise<void> {
  await s.tx.query("select bitrix_sync.complete_rebind($1, $2)", [s.wf.id, s.wf.lease_token]);
  return await s.succeed("rebound");
}

/** The steps of contact.rebind, by the name persisted in current_step. */
export const rebindSteps: Readonly<Record<string, AfterStep>> = {
  rebind_read: afterRebindRead,
  rebind_target: (s, last) => s.afterWrite(last, () => clearPrevious(s)),
  rebind_clear_previous: afterClearPrevious,
};
