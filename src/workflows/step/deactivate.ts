// contact.deactivate (§5.3): turn the linked Contact's registration flag off and close the link.
// Step names and outcome codes are persisted: keep them.
import { isNotFound } from "../decide/pass.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";

export async function startDeactivate(s: Step): Promise<void> {
  const mapping = await s.activeMapping();
  if (!mapping) return await s.succeed("no_mapping");
  s.sd.contact = Number(mapping.external_id);
  return await s.issue(
    "contact.update",
    { contact_id: s.sd.contact, registered: false },
    "deactivate_contact",
  );
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

/** The steps of contact.deactivate, by the name persisted in current_step. */
export const deactivateSteps: Readonly<Record<string, AfterStep>> = {
  deactivate_contact: afterDeactivate,
};
