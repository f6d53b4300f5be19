// contact.update (§5.2): read the linked Contact's phones, then write the App's phone (by the phone
// rule, ../decide/update.ts) and the registration flag if they differ. Without a link it runs as
// map_or_create. Step names and outcome codes are persisted: keep them.
import { type AppUser, hasValidPhone, isEligible, loadAppUser, loadSnapshot } from "../../app-data.js";
import { matchesPiiHash, piiHash } from "../../hash.js";
import { isNotFound } from "../decide/pass.js";
import { checkUpdateRead, desiredPhoneHash, planContactUpdate } from "../decide/update.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";
import { finalRead, startMapOrCreate } from "./map-or-create.js";

/** map_or_create passes that use the update steps: they end with map_or_create's final read. */
function endsWithFinalRead(s: Step): boolean {
  return s.sd.branch === "previous" || s.sd.branch === "mapped_phone";
}

/** Reads the linked Contact's phones and flag (the projection holds phone hashes, not numbers). */
function readForUpdate(s: Step): Promise<void> {
  return s.issue("contact.read", { ids: [s.sd.contact], purpose: "phones" }, "read_for_update");
}

export async function startUpdate(s: Step, user: AppUser | null): Promise<void> {
  if (!isEligible(user)) return await s.succeed("not_eligible");
  const mapping = await s.activeMapping();
  if (!mapping) {
    // No link yet: this becomes a map_or_create (§5.2), which does its own phone search.
    s.sd.as = "contact.map_or_create";
    return await startMapOrCreate(s, user);
  }
  if (!hasValidPhone(user)) {
    await s.alert({ type: "invalid_phone", userId: user.id, currentContactId: mapping.external_id });
    return await s.manual("invalid_phone");
  }
  s.sd.contact = Number(mapping.external_id);
  return await readForUpdate(s);
}

async function afterReadForUpdate(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const check = checkUpdateRead(s.wf.user_id, s.response(last));
  if (check.kind === "contact_missing") {
    await s.breakActiveMapping();
    return await s.succeed("contact_missing");
  }
  if (check.kind === "user_id_mismatch") {
    await s.alert({ type: "user_id_mismatch", userId: s.wf.user_id, currentContactId: check.contactId });
    return await s.succeed("user_id_mismatch");
  }
  const c = check.contact;
  const user = await loadAppUser(s.tx, s.wf.user_id);
  const phone = user && hasValidPhone(user) ? (user.phone as string) : null;
  // The phone became invalid (or the user vanished) since the pass started: the start step decides again.
  if (phone === null) return await s.start();
  // Compared by value: a read stored by an older process holds its entries' hashes in an older form.
  const desired = desiredPhoneHash(
    c,
    (hash) => matchesPiiHash(hash, "phone", phone),
    piiHash("phone", phone) as string,
  );
  const snap = await loadSnapshot(s.tx, String(c.id));
  const plan = planContactUpdate(c, desired, snap?.phoneHash);
  // A pass of map_or_create that came here (a Contact linked again, or a phone behind) ends with the
  // final read, which applies the CRM-master fields.
  if (plan.kind === "succeed")
    return endsWithFinalRead(s) ? await finalRead(s) : await s.succeed(plan.outcome);
  return await s.issue("contact.update", plan.params, "update_contact");
}

async function afterUpdate(s: Step, last: CommandRow): Promise<void> {
  if (last.status === "succeeded")
    return endsWithFinalRead(s) ? await finalRead(s) : await s.succeed("updated");
  // Resent if idempotent (a flag, a phone by its entry ID), else read again: ../decide/unanswered-write.ts.
  if (last.status === "uncertain") return await s.unanswered(last);
  if (isNotFound(last)) {
    await s.breakActiveMapping();
    return await s.succeed("contact_missing");
  }
  return await s.failWith(last);
}

/** The steps of contact.update, by the name persisted in current_step. */
export const updateSteps: Readonly<Record<string, AfterStep>> = {
  read_for_update: afterReadForUpdate,
  update_contact: afterUpdate,
  // Back from waiting_retry after an unanswered append (../decide/unanswered-write.ts).
  reread_for_update: (s) => readForUpdate(s),
};
