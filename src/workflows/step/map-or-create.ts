// contact.map_or_create (§5.1): link the user to their Contact, found through the active mapping or
// by phone (branches B0–B2.2, ../decide/candidates.ts), or create one. The recovery of an uncertain
// create is in ./create-recovery.ts. Step names and outcome codes are persisted: keep them.
import {
  type AppUser,
  hasValidPhone,
  isEligible,
  loadAppUser,
  loadSnapshot,
  snapshotCreated,
} from "../../app-data.js";
import { matchesPiiHash, piiHash } from "../../hash.js";
import { decide } from "../decide/candidates.js";
import { decideManualLink, manualDecision } from "../decide/manual.js";
import {
  afterFinalRead,
  afterPhoneSearch,
  afterReadMapped,
  candidatesOf,
  foundIds,
} from "../decide/map-or-create.js";
import { PROCESS_STARTED_AT } from "../process-start.js";
import type { CommandRow } from "../types.js";
import type { AfterStep, Step } from "./core.js";

export async function startMapOrCreate(s: Step, user: AppUser | null): Promise<void> {
  if (!isEligible(user)) return await s.succeed("not_eligible");
  if (!hasValidPhone(user)) {
    await s.alert({ type: "invalid_phone", userId: user.id });
    return await s.manual("invalid_phone");
  }
  const mapping = await s.activeMapping();
  if (mapping) {
    s.sd.contact = Number(mapping.external_id);
    return await s.issue("contact.read", { ids: [s.sd.contact], purpose: "apply" }, "read_mapped");
  }
  // A person decided for a workflow parked on too many candidates (resume_parked_workflow).
  const m = manualDecision(s.sd);
  if (m?.decision === "link_contact") {
    s.sd.branch = "manual_link";
    return await s.issue("contact.read", { ids: [m.contactId], purpose: "candidates" }, "manual_link_read");
  }
  if (m?.decision === "create_contact") {
    s.sd.branch = "manual_create";
    return await s.issue("contact.add", {}, "create_contact");
  }
  return await s.issue("contact.find_by_phone", {}, "find_by_phone");
}

/** The read that applies the chosen Contact's CRM-master fields to the App, and checks it once more. */
export async function finalRead(s: Step): Promise<void> {
  return await s.issue("contact.read", { ids: [s.sd.contact], purpose: "apply" }, "final_read");
}

/** Sets user_id and the registration flag on a Contact that is (or becomes) this user's. */
function claimCommand(s: Step, contactId: number, step: "restore_flag" | "claim_contact"): Promise<void> {
  return s.issue("contact.update", { contact_id: contactId, set_user: "self", registered: true }, step);
}

async function userIdMismatch(s: Step): Promise<void> {
  await s.alert({ type: "user_id_mismatch", userId: s.wf.user_id, currentContactId: s.sd.contact ?? null });
  return await s.succeed("user_id_mismatch");
}

async function readMapped(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const d = afterReadMapped(s.response(last));
  switch (d.kind) {
    case "search_again":
      await s.breakActiveMapping();
      delete s.sd.contact;
      return await s.issue("contact.find_by_phone", {}, "find_by_phone");
    case "user_id_mismatch":
      return await userIdMismatch(s);
    case "restore_flag":
    case "succeed":
      // A pass that runs as map_or_create may carry a phone change that joined the workflow (the
      // newest intent decides the pass): unless the snapshot says the Contact holds the App's phone,
      // the update steps write it, and the flag (found by the chaos suite: a return coalesced with a
      // phone change left the old number on the Contact).
      if (await phoneBehind(s, s.response(last))) {
        s.sd.branch = "mapped_phone";
        return await s.issue("contact.read", { ids: [s.sd.contact], purpose: "phones" }, "read_for_update");
      }
      if (d.kind === "restore_flag") return await claimCommand(s, s.sd.contact as number, "restore_flag");
      return await s.succeed(d.outcome);
  }
}

/**
 * The App's phone is not the one the snapshot says bitrix-sync last wrote to the linked Contact (by
 * value, so a snapshot hash of an older form (src/hash.ts) of the same phone is not "behind"), or
 * the Contact just read no longer carries it (a manager removed it: the convergence audit's
 * phone_missing, repaired through this pass).
 */
async function phoneBehind(s: Step, read: Record<string, unknown>): Promise<boolean> {
  const user = await loadAppUser(s.tx, s.wf.user_id);
  if (!user || !hasValidPhone(user)) return false;
  const hash = piiHash("phone", user.phone as string);
  const onContact = read.phone_hashes;
  if (Array.isArray(onContact) && !onContact.includes(hash)) return true;
  const snap = await loadSnapshot(s.tx, String(s.sd.contact));
  return !matchesPiiHash(snap?.phoneHash, "phone", user.phone);
}

/**
 * How old (seconds) the phone search a create is decided on may be. Between a search and the
 * decision that follows it nothing else creates a Contact for the user (one workflow per user), and
 * the two are normally a moment apart. A database restored from a backup taken between them (the
 * restore drill, docs/reliability.md#drills) resumes the workflow later, in a process started on
 * the restored database, while the service that ran on the lost database may have created the
 * Contact meanwhile: a search older than this, or stored before this process started, is made
 * again (after an ordinary restart that costs one search).
 */
export const SEARCH_MAX_AGE_SEC = 60;
/** Searches made again in one pass at most; then the create goes ahead on the newest. */
const SEARCH_RENEWALS = 3;

/**
 * True when this pass's newest phone search is older than SEARCH_MAX_AGE_SEC (database time) or was
 * stored before this process started.
 */
async function searchStale(s: Step): Promise<boolean> {
  if ((Number(s.sd.searches_renewed) || 0) >= SEARCH_RENEWALS) return false;
  const { rows } = await s.tx.query<{ stale: boolean }>(
    `select coalesce(now() - max(updated_at) > make_interval(secs => $2) or max(updated_at) < $3, false) as stale
       from bitrix_sync.crm_commands
      where workflow_id = $1 and command_type = 'contact.find_by_phone' and status = 'succeeded'`,
    [s.wf.id, SEARCH_MAX_AGE_SEC, PROCESS_STARTED_AT],
  );
  return rows[0]?.stale === true;
}

/**
 * Before a create: a user who was deactivated and comes back, with a phone changed meanwhile, is not
 * found by the phone search, yet the Contact of their last link still carries their user id (the
 * chaos suite found a second Contact created for such a user). That Contact is read once per pass;
 * if it is still theirs it is linked again (step read_previous), else the create goes ahead.
 */
async function createUnlessPrevious(s: Step): Promise<void> {
  if (await searchStale(s)) {
    s.sd.searches_renewed = (Number(s.sd.searches_renewed) || 0) + 1;
    delete s.sd.previous_checked;
    return await s.issue("contact.find_by_phone", {}, "find_by_phone");
  }
  if (!s.sd.previous_checked) {
    const { rows } = await s.tx.query<{ external_id: string }>(
      `select external_id from bitrix_sync.entity_external_mapping
        where entity_id = $1 and entity_type = 'user' and external_system = 'bitrix24'
          and status = 'closed' and close_reason = 'deactivated'
        order by closed_at desc limit 1`,
      [s.wf.user_id],
    );
    const previous = Number(rows[0]?.external_id);
    if (Number.isSafeInteger(previous) && previous > 0) {
      s.sd.previous_checked = true;
      return await s.issue("contact.read", { ids: [previous], purpose: "candidates" }, "read_previous");
    }
  }
  // A user the App had before this process started may already have a Contact carrying their id
  // that no link and no phone search shows: made by a service on a database since restored from a
  // backup, with a phone changed after the backup (the restore drill found the second Contact).
  // One search by the user id first; a user who signed up while this process runs cannot have one.
  // The search's step is find_by_phone, a name the release before this one knows: during a rolling
  // upgrade a replica of that release may take the step (a step name it does not know fails the
  // workflow with unknown_step; drill:upgrade found that). This release tells the two searches apart
  // by the command (findOwn); that release treats the ids found as phone candidates: none, the
  // create goes ahead; some, they are read and the one carrying this user's id is linked (it then
  // leaves the App's phone to the convergence audit, which finds it missing).
  if (!s.sd.own_checked && (await userPredatesProcess(s))) {
    s.sd.own_checked = true;
    return await s.issue("contact.find_by_user_id", {}, "find_by_phone");
  }
  s.sd.branch ??= "B0";
  return await s.issue("contact.add", {}, "create_contact");
}

async function userPredatesProcess(s: Step): Promise<boolean> {
  const { rows } = await s.tx.query<{ old: boolean }>(
    "select created_at < $2 as old from han_app.user_identity where id = $1",
    [s.wf.user_id, PROCESS_STARTED_AT],
  );
  return rows[0]?.old === true;
}

/**
 * The search by the user id before a create (step find_by_phone, command contact.find_by_user_id):
 * Contacts carrying the user's id are read, and one that no other active user holds is linked again
 * as read_previous does (the App's phone and the flag written); none found, the create goes ahead.
 */
async function findOwn(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const ids = foundIds(s.response(last));
  if (ids.length === 0) return await createUnlessPrevious(s);
  return await s.issue("contact.read", { ids, purpose: "candidates" }, "read_previous");
}

/**
 * Step read_previous: the Contact of the user's last link, if it still carries their user id and no
 * other active user holds it, is linked again; the update steps then write the App's phone and the
 * flag (read_for_update), and the final read applies its CRM-master fields.
 */
async function readPrevious(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await createUnlessPrevious(s);
  const mine = candidatesOf(s.response(last)).find((c) => c.userId === s.wf.user_id);
  if (mine) {
    const { rows } = await s.tx.query(
      "select 1 from bitrix_sync.active_mapping_for_contact($1) where id is not null",
      [String(mine.id)],
    );
    if (rows.length === 0) {
      s.sd.contact = mine.id;
      s.sd.branch = "previous";
      await s.openMapping(mine.id);
      await s.keepPhoneLinkHold(mine.id);
      return await s.issue("contact.read", { ids: [mine.id], purpose: "phones" }, "read_for_update");
    }
  }
  return await createUnlessPrevious(s);
}

async function findByPhone(s: Step, last: CommandRow): Promise<void> {
  if (last.command_type === "contact.find_by_user_id") return await findOwn(s, last);
  if (last.status !== "succeeded") return await s.failWith(last);
  const d = afterPhoneSearch(foundIds(s.response(last)));
  switch (d.kind) {
    case "create":
      s.sd.branch = "B0";
      return await createUnlessPrevious(s);
    case "too_many":
      await s.alert({ type: "too_many_candidates", userId: s.wf.user_id, candidates: d.ids });
      return await s.manual("too_many_candidates");
    case "read":
      return await s.issue("contact.read", { ids: d.ids, purpose: "candidates" }, "read_candidates");
  }
}

async function readCandidates(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const candidates = candidatesOf(s.response(last));
  const d = decide(s.wf.user_id, candidates, await s.holdings(candidates));
  s.sd.branch = d.kind === "restore" ? "restore" : d.branch;
  switch (d.kind) {
    case "restore":
      s.sd.contact = d.contactId;
      await s.openMapping(d.contactId);
      await s.keepPhoneLinkHold(d.contactId);
      if (d.fixFlag) return await claimCommand(s, d.contactId, "restore_flag");
      return await finalRead(s);
    case "take":
      s.sd.contact = d.contactId;
      s.sd.previous_user = d.previousUserId;
      s.sd.others = d.others;
      return await claimCommand(s, d.contactId, "claim_contact");
    case "create":
      if (d.branch !== "B0") {
        await s.alert({
          type: "contact_bound_to_other_user",
          userId: s.wf.user_id,
          selectedContactId: d.conflictContactId,
          candidates: d.candidates,
          details: { branch: d.branch, candidate_count: d.candidates.length },
        });
      }
      return await createUnlessPrevious(s);
  }
}

async function manualLinkRead(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const m = manualDecision(s.sd);
  if (m?.decision !== "link_contact") return await s.fail("manual_decision_missing");
  const read = candidatesOf(s.response(last));
  const d = decideManualLink(s.wf.user_id, m.contactId, read, await s.holdings(read));
  switch (d.kind) {
    case "park":
      return await s.manual(d.code);
    case "restore":
      s.sd.contact = d.contactId;
      await s.openMapping(d.contactId);
      if (d.fixFlag) return await claimCommand(s, d.contactId, "restore_flag");
      return await finalRead(s);
    case "take":
      s.sd.contact = d.contactId;
      s.sd.previous_user = d.previousUserId;
      s.sd.others = [];
      return await claimCommand(s, d.contactId, "claim_contact");
  }
}

async function claimContact(s: Step, last: CommandRow): Promise<void> {
  return await s.afterWrite(last, async () => {
    const contactId = s.sd.contact as number;
    if (s.sd.previous_user) {
      // Takeover of a Contact of an inactive/deleted user: close that link, keep it as history.
      const { rows } = await s.tx.query<{ id: string }>(
        "select id from bitrix_sync.active_mapping_for_contact($1) where id is not null",
        [String(contactId)],
      );
      if (rows[0])
        await s.tx.query("select bitrix_sync.close_mapping($1, 'taken_over', $2)", [rows[0].id, s.wf.id]);
    }
    await s.openMapping(contactId);
    // Found by phone alone: the link trusts the App's phone number. A link a person chose
    // (manual_link) is not one; §4's Contact carrying the user id never comes here (restore).
    if (s.sd.branch === "B1.1" || s.sd.branch === "B2.1") await s.holdPhoneLink(contactId);
    const others = (s.sd.others as number[] | undefined) ?? [];
    if (s.sd.branch === "B2.1" && others.length > 0) {
      await s.alert({
        type: "duplicate_contacts",
        userId: s.wf.user_id,
        selectedContactId: contactId,
        candidates: [contactId, ...others],
        details: { candidate_count: others.length + 1 },
      });
    }
    return await finalRead(s);
  });
}

async function createContact(s: Step, last: CommandRow): Promise<void> {
  if (last.status === "succeeded") {
    const r = s.response(last);
    const contactId = Number(r.contact_id);
    if (!Number.isSafeInteger(contactId) || contactId <= 0) return await s.fail("malformed_result");
    const w = (r.written as Record<string, string | null> | undefined) ?? {};
    await s.openMapping(contactId);
    await snapshotCreated(s.tx, String(contactId), s.wf.user_id, {
      nameHash: w.name_hash ?? null,
      emailHash: w.email_hash ?? null,
      phoneHash: w.phone_hash ?? null,
      citizenshipEnumId: w.citizenship_enum_id ?? null,
    });
    s.sd.contact = contactId;
    return await s.succeed("created");
  }
  // The create may have landed: searched for by the user id it wrote, never created blindly
  // (../decide/unanswered-write.ts, ./create-recovery.ts).
  if (last.status === "uncertain") return await s.unanswered(last);
  return await s.failWith(last);
}

async function finalReadDone(s: Step, last: CommandRow): Promise<void> {
  if (last.status !== "succeeded") return await s.failWith(last);
  const d = afterFinalRead(s.response(last), s.sd.branch);
  switch (d.kind) {
    case "contact_missing":
      await s.breakActiveMapping();
      return await s.succeed("contact_missing");
    case "user_id_mismatch":
      return await userIdMismatch(s);
    case "succeed":
      return await s.succeed(d.outcome);
  }
}

/** The steps of contact.map_or_create, by the name persisted in current_step. */
export const mapOrCreateSteps: Readonly<Record<string, AfterStep>> = {
  read_mapped: readMapped,
  find_by_phone: findByPhone,
  read_candidates: readCandidates,
  read_previous: readPrevious,
  manual_link_read: manualLinkRead,
  claim_contact: claimContact,
  restore_flag: (s, last) => s.afterWrite(last, () => finalRead(s)),
  create_contact: createContact,
  final_read: finalReadDone,
};
