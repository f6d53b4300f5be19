// contact.deactivate (§5.3): turn the linked Contact's registration flag off and close the link.
// Without an active link, the Contacts that still carry the user's id with the flag set (a link
// closed while a manager ticked the flag again, a restore from backup, a user the App lost) are found
// by that id and have their flag turned off: the registration flag follows the user (§3.1), and the
// convergence audit's repair of registered_inactive_user / registered_unknown_user relies on it.
// Step names and outcome codes are persisted: keep them. The search, the read and the unregistering
// all run under deactivate_contact, the one step name the release before this one knows: during a
// rolling upgrade a replica of that release may take the step, and a name it does not know fails the
// workflow with unknown_step (drill:upgrade found that). This release tells them apart by the
// command; that release ends the workflow as deactivated and leaves the flag to the convergence
// audit, which finds it again.
import { candidatesOf, foundIds } from "../decide/map-or-create.js";
import { isNotFound } from "../decide/pass.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";

export async function startDeactivate(s: Step): Promise<void> {
  // A pass starts afresh: what an earlier pass left to unregister does not steer this one's step.
  delete s.sd.unregister;
  delete s.sd.unregistered;
  const mapping = await s.activeMapping();
  if (!mapping) return await s.issue("contact.find_by_user_id", {}, "deactivate_contact");
  s.sd.contact = Number(mapping.external_id);
  return await s.issue(
    "contact.update",
    { contact_id: s.sd.contact, registered: false },
    "deactivate_contact",
  );
}

/** Step deactivate_contact: what follows the command it issued (see the top of this file). */
async function afterDeactivateStep(s: Step, last: CommandRow): Promise<void> {
  if (last.command_type === "contact.find_by_user_id") return await afterFindRegistered(s, last);
  if (last.command_type === "contact.read") return await afterReadRegistered(s, last);
  if (s.sd.unregister !== undefined) return await afterUnregister(s, last);
  return await afterDeactivate(s, last);
}

async function afterDeactivate(s: Step, last: CommandRow): Promise<void> {
  const mapping = await s.activeMapping();
  if (last.status === "succeeded") {
    if (mapping)
      await s.tx.query("select bitrix_sync.close_mapping($1, 'deactivated', $2)", [mapping.id, s.wf.id]);
    return await s.succeed("deactivated");
  }
  if (isNotFound(last)) {
    if (mapping) await s.breakMapping(mapping.id, mapping.external_id);
    return await s.succeed("contact_missing");
  }
  return await s.afterWrite(last, () => s.failWith(last));
}

/** After the search: the Contacts carrying the user's id (a page of them, oldest first). */
async function afterFindRegistered(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const ids = foundIds(s.response(last));
  if (ids.length === 0) return await s.succeed("no_mapping");
  return await s.issue("contact.read", { ids, purpose: "candidates" }, "deactivate_contact");
}

/** After the read: those still carrying the user's id with the flag not off are unregistered. */
async function afterReadRegistered(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  s.sd.unregister = candidatesOf(s.response(last))
    .filter((c) => c.userId === s.wf.user_id && c.registered !== false)
    .map((c) => c.id)
    .sort((a, b) => a - b);
  return await unregisterNext(s);
}

async function unregisterNext(s: Step): Promise<void> {
  const next = (s.sd.unregister as number[] | undefined)?.[0];
  if (next === undefined) return await s.succeed(s.sd.unregistered ? "unregistered" : "no_mapping");
  return await s.issue("contact.update", { contact_id: next, registered: false }, "deactivate_contact");
}

/** After an unregistering: the flag of one Contact is off; on to the next. */
async function afterUnregister(s: Step, last: CommandRow): Promise<void> {
  return await s.afterWrite(last, async () => {
    s.sd.unregister = ((s.sd.unregister as number[] | undefined) ?? []).slice(1);
    s.sd.unregistered = Number(s.sd.unregistered ?? 0) + 1;
    return await unregisterNext(s);
  });
}

/** The steps of contact.deactivate, by the name persisted in current_step. */
export const deactivateSteps: Readonly<Record<string, AfterStep>> = {
  deactivate_contact: afterDeactivateStep,
};
