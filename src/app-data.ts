// What the workflows and the CRM->App path read from and write to the App's tables. Reads are
// always of the current state (§6.2: the queue payload is not a snapshot). CRM-master writes happen
// in one transaction with han.sync_suppress set, so they never echo back as App->CRM intents (§3.1,
// §5.5).
import type pg from "pg";
import type { CitizenshipDictionary, ContactRecord } from "./crm/contact-fields.js";
import { isValidRuPhone, pickEmail } from "./crm/contact-fields.js";
import { contentHash, piiHash } from "./hash.js";

export type Db = pg.PoolClient | pg.Pool | pg.Client;

export interface AppUser {
  id: string;
  phone: string | null;
  identityStatus: string;
  profileStatus: string | null;
  fullName: string | null;
  email: string | null;
  citizenship: string | null;
}

interface AppUserRow {
  id: string;
  phone_number: string | null;
  identity_status: string;
  profile_status: string | null;
  full_name: string | null;
  email: string | null;
  citizenship: string | null;
}

const APP_USER_COLUMNS = `u.id, u.phone_number, u.record_status as identity_status, p.record_status as profile_status,
            p.full_name, p.email, p.citizenship
       from han_app.user_identity u
       left join han_app.client_profile p on p.user_id = u.id`;

function appUserOf(r: AppUserRow): AppUser {
  return {
    id: r.id,
    phone: r.phone_number,
    identityStatus: r.identity_status,
    profileStatus: r.profile_status,
    fullName: r.full_name,
    email: r.email,
    citizenship: r.citizenship,
  };
}

/** The user's identity and profile, or null when the identity does not exist. */
export async function loadAppUser(db: Db, userId: string): Promise<AppUser | null> {
  const { rows } = await db.query<AppUserRow>(`select ${APP_USER_COLUMNS} where u.id = $1`, [userId]);
  const r = rows[0];
  return r ? appUserOf(r) : null;
}

/**
 * Several users in one query (the pump hydrates a whole batch at once). Every id asked for is a key
 * of the result: null when the identity does not exist.
 */
export async function loadAppUsers(db: Db, userIds: readonly string[]): Promise<Map<string, AppUser | null>> {
  const out = new Map<string, AppUser | null>(userIds.map((id) => [id, null]));
  if (userIds.length === 0) return out;
  const { rows } = await db.query<AppUserRow>(`select ${APP_USER_COLUMNS} where u.id = any($1::uuid[])`, [
    [...new Set(userIds)],
  ]);
  for (const r of rows) out.set(r.id, appUserOf(r));
  return out;
}

/** Identity and profile both active: the user may be linked to a Contact (§5.1 "eligible"). */
export function isEligible(u: AppUser | null): u is AppUser {
  return u !== null && u.identityStatus === "active" && u.profileStatus === "active";
}

export function hasValidPhone(u: AppUser): boolean {
  return isValidRuPhone(u.phone);
}

/**
 * The keyed hash (src/hash.ts) of the App-master content an intent wants in the CRM. Equal hashes
 * mean semantically equal intents (docs/workflows.md, "Guarantees": equal intents are skipped). Only App-master fields count:
 * phone and status. A workflow that holds an older form (v2, or none: migration 000029 cleared the
 * unkeyed ones) never equals a new hash: the user's next intent runs one pass more, which reads the
 * Contact and finds nothing to write (the update steps compare the phone by value, whatever the
 * form of the hashes they hold).
 */
export function desiredContentHash(intent: string, u: AppUser | null, repair?: string): string {
  // An intent a drift repair recorded (reason drift_repair) is about what the CRM holds, not about
  // a change of the App: `repair` (its queue row id) keeps it from being taken as equal to the
  // user's last workflow and skipped.
  const extra = repair === undefined ? {} : { repair };
  if (!u) return contentHash({ intent, missing: true, ...extra });
  const active = u.identityStatus === "active" && u.profileStatus === "active";
  return contentHash({ intent, active, phone: intent === "contact.deactivate" ? null : u.phone, ...extra });
}

export interface Snapshot {
  contactId: string;
  userId: string;
  phoneHash: string | null;
  crmUpdatedAt: Date | null;
  lastAppliedSource: string | null;
}

export async function loadSnapshot(db: Db, contactId: string): Promise<Snapshot | null> {
  const { rows } = await db.query<{
    contact_id: string;
    user_id: string;
    phone_hash: string | null;
    crm_updated_at: Date | null;
    last_applied_source: string | null;
  }>(
    "select contact_id, user_id, phone_hash, crm_updated_at, last_applied_source from bitrix_sync.contact_snapshots where contact_id = $1",
    [contactId],
  );
  const r = rows[0];
  return r
    ? {
        contactId: r.contact_id,
        userId: r.user_id,
        phoneHash: r.phone_hash,
        crmUpdatedAt: r.crm_updated_at,
        lastAppliedSource: r.last_applied_source,
      }
    : null;
}

/** Records what bitrix-sync wrote into a newly created Contact (§5.1 step 9: app_create). */
export async function snapshotCreated(
  db: Db,
  contactId: string,
  userId: string,
  written: {
    nameHash: string | null;
    emailHash: string | null;
    phoneHash: string | null;
    citizenshipEnumId: string | null;
  },
): Promise<void> {
  await db.query("select bitrix_sync.record_contact_created($1, $2, $3, $4, $5, $6)", [
    contactId,
    userId,
    written.nameHash,
    written.emailHash,
    written.phoneHash,
    written.citizenshipEnumId,
  ]);
}

/** Notes the phone bitrix-sync last wrote (so the next change overwrites that entry, not another). */
export async function snapshotPhone(
  db: Db,
  contactId: string,
  userId: string,
  phoneHash: string,
): Promise<void> {
  await db.query("select bitrix_sync.record_contact_phone($1, $2, $3)", [contactId, userId, phoneHash]);
}

/** Marks the App's copy as possibly behind the CRM without clearing it (§5.5 Contact not found). */
export async function markSnapshotStale(
  db: Db,
  contactId: string,
  userId: string,
  reason: string,
): Promise<void> {
  await db.query("select bitrix_sync.mark_contact_snapshot_stale($1, $2, $3)", [contactId, userId, reason]);
}

export type ApplySource = "webhook" | "reconciliation" | "app_create";

export type ApplyResult =
  | { applied: true; stale: false }
  /** The Contact read is older than what the App already holds: nothing changed (§5.5). */
  | { applied: false; stale: true }
  | { applied: false; stale: false; reason: "unknown_citizenship"; enumId: string };

/** The name and e-mail a Contact gives the App: NAME trimmed, the e-mail by the pick rule (§3.3). */
export function crmMasterValues(contact: ContactRecord): { name: string | null; email: string | null } {
  return { name: contact.name?.trim() ? contact.name.trim() : null, email: pickEmail(contact.emails) };
}

/**
 * Writes the Contact's CRM-master fields into the App profile in the caller's transaction through
 * bitrix_sync.apply_crm_master_fields (han.sync_suppress set, so no App->CRM intent is recorded),
 * which also updates the snapshot. `full_name` is
 * NAME only; citizenship is the dictionary's display value; email follows the pick rule; a value
 * absent in the CRM clears the App field. An older read than the snapshot changes nothing.
 */
export async function applyCrmMaster(
  tx: pg.PoolClient,
  userId: string,
  contact: ContactRecord,
  source: ApplySource,
  dictionary: CitizenshipDictionary,
  opts: { webhookReceivedAt?: Date | null } = {},
): Promise<ApplyResult> {
  const contactId = String(contact.id);
  const crmUpdatedAt = contact.updatedAt ? new Date(contact.updatedAt) : null;
  const { rows } = await tx.query<{ crm_updated_at: Date | null }>(
    "select crm_updated_at from bitrix_sync.contact_snapshots where contact_id = $1 for update",
    [contactId],
  );
  const known = rows[0]?.crm_updated_at ?? null;
  if (known && crmUpdatedAt && crmUpdatedAt.getTime() < known.getTime()) {
    return { applied: false, stale: true };
  }
  let citizenship: string | null = null;
  let loadedAt: number | null = null;
  if (contact.citizenshipEnumId) {
    const found = await dictionary.resolve(contact.citizenshipEnumId);
    loadedAt = found.loadedAt;
    if (!found.found) {
      return {
        applied: false,
        stale: false,
        reason: "unknown_citizenship",
        enumId: contact.citizenshipEnumId,
      };
    }
    citizenship = found.item.value;
  }
  const { name, email } = crmMasterValues(contact);

  await tx.query(
    "select bitrix_sync.apply_crm_master_fields($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    [
      userId,
      contactId,
      name,
      citizenship,
      email,
      piiHash("name", name),
      piiHash("email", email),
      contact.citizenshipEnumId,
      loadedAt === null ? null : new Date(loadedAt),
      contact.registered,
      contact.createdAt ? new Date(contact.createdAt) : null,
      crmUpdatedAt,
      source,
      opts.webhookReceivedAt ?? null,
    ],
  );
  return { applied: true, stale: false };
}
