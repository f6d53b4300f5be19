// Turning persisted commands into CRM calls and CRM results into persisted facts. The database
// holds only safe parameters (IDs, flags); values with PII (phone, name, email) are read from the
// App at send time ("hydration") and never stored. A result is reduced to a safe projection in the
// completion transaction; a read of purpose "apply" writes CRM-master fields into the App there.
import type pg from "pg";
import {
  type AppUser,
  applyCrmMaster,
  crmMasterValues,
  type Db,
  isEligible,
  loadAppUser,
  loadSnapshot,
  snapshotPhone,
} from "../app-data.js";
import type { CommandResults, CommandType, CrmCommand } from "../crm/catalogue.js";
import type { HydrationCode } from "../crm/classify.js";
import type { CitizenshipDictionary, ContactRecord } from "../crm/contact-fields.js";
import { isValidRuPhone, type PhonePlan, phoneChange } from "../crm/contact-fields.js";
import { heldValuesHash, isLegacyHash, matchesPiiHash, piiHash } from "../hash.js";
import type { CommandRow } from "./types.js";

/** A command the pump can send, plus what its handler needs to know about what was sent. */
export interface Hydrated {
  cmd: CrmCommand;
  /** The user of the command's workflow (null for alert commands). */
  userId: string | null;
  memo: {
    phoneHash?: string | null;
    nameHash?: string | null;
    emailHash?: string | null;
    citizenshipEnumId?: string | null;
  };
}

/** Hydration refused: a business failure (waiting_manual + alert) or a broken command (DLQ). */
export interface HydrateFailure {
  kind: "business" | "permanent";
  code: HydrationCode;
}

export class BusinessFailure extends Error {
  override name = "BusinessFailure";
  constructor(readonly code: "unknown_citizenship" | "invalid_phone") {
    super(`business failure: ${code}`);
  }
}

/** Thrown when hydration would wait on a dictionary load; the command is released and retried. */
export class NotReady extends Error {
  override name = "NotReady";
}

/**
 * The pump hydrates while holding a limiter permit; a dictionary load needs a permit of its own.
 * Waiting briefly, then giving up (the load goes on in the background), rules out a deadlock when
 * every in-flight slot is held by a pump waiting for the dictionary.
 */
async function withinMs<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new NotReady("citizenship dictionary is loading")), ms);
  });
  p.catch(() => undefined);
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function ids(v: unknown): number[] {
  return Array.isArray(v) ? v.map(Number).filter((n) => Number.isInteger(n) && n > 0) : [];
}

/** Builds the CRM call of a persisted command from its safe parameters and the App's current data. */
export async function hydrate(
  db: Db,
  row: CommandRow,
  userId: string | null,
  dictionary: CitizenshipDictionary,
  /** Users already read for the whole batch (loadAppUsers); a user missing from it is read here. */
  users?: ReadonlyMap<string, AppUser | null>,
): Promise<{ ok: true; value: Hydrated } | { ok: false; failure: HydrateFailure }> {
  const p = row.params;
  const type = row.command_type as CommandType;
  const key = `c${row.id}`;
  switch (type) {
    case "contact.find_by_phone":
    case "contact.add":
    case "contact.update": {
      // Setting the flag or clearing the user id needs nothing of the App: such an update goes out
      // also for a user the App no longer has (a deactivation turning off a stray registration).
      if (type === "contact.update" && p.phone === undefined && p.set_user !== "self") {
        const contactId = Number(p.contact_id);
        if (!Number.isInteger(contactId) || contactId <= 0) {
          return { ok: false, failure: { kind: "permanent", code: "invalid_params" } };
        }
        const params: Extract<CrmCommand, { type: "contact.update" }>["params"] = { id: contactId };
        if (p.set_user === "clear") params.userId = null;
        if (typeof p.registered === "boolean") params.registered = p.registered;
        return { ok: true, value: { userId, cmd: { type, key, params }, memo: {} } };
      }
      const user = !userId
        ? null
        : users?.has(userId)
          ? (users.get(userId) ?? null)
          : await loadAppUser(db, userId);
      if (!user) return { ok: false, failure: { kind: "permanent", code: "invalid_params" } };
      const needsPhone = type !== "contact.update" || p.phone !== undefined;
      if (needsPhone && !isValidRuPhone(user.phone)) {
        return { ok: false, failure: { kind: "business", code: "invalid_phone" } };
      }
      const phone = user.phone as string;
      if (type === "contact.find_by_phone") {
        return {
          ok: true,
          value: {
            userId,
            cmd: { type, key, params: { phones: [phone] } },
            memo: { phoneHash: piiHash("phone", phone) },
          },
        };
      }
      if (type === "contact.add") {
        if (!isEligible(user)) return { ok: false, failure: { kind: "business", code: "user_not_eligible" } };
        const name = user.fullName?.trim() || null;
        const email = user.email?.trim() || null;
        const cit = user.citizenship ? await withinMs(dictionary.findByValue(user.citizenship), 2_000) : null;
        return {
          ok: true,
          value: {
            userId,
            cmd: {
              type,
              key,
              params: {
                phone,
                userId: user.id,
                registered: true,
                name,
                email,
                citizenshipEnumId: cit?.id ?? null,
              },
            },
            memo: {
              phoneHash: piiHash("phone", phone),
              nameHash: piiHash("name", name),
              emailHash: piiHash("email", email),
              citizenshipEnumId: cit?.id ?? null,
            },
          },
        };
      }
      const contactId = Number(p.contact_id);
      if (!Number.isInteger(contactId) || contactId <= 0) {
        return { ok: false, failure: { kind: "permanent", code: "invalid_params" } };
      }
      const params: Extract<CrmCommand, { type: "contact.update" }>["params"] = { id: contactId };
      if (p.set_user === "self") params.userId = user.id;
      if (p.set_user === "clear") params.userId = null;
      if (typeof p.registered === "boolean") params.registered = p.registered;
      const memo: Hydrated["memo"] = {};
      const ph = p.phone as { entry_id?: number; value_type?: string; append?: boolean } | undefined;
      if (ph) {
        // The update step chose the entry (planPhoneUpdate on hashes); the number is the App's, read now.
        const plan: PhonePlan = ph.entry_id
          ? { entryId: ph.entry_id, valueType: ph.value_type || "MOBILE" }
          : { append: true };
        params.phones = [phoneChange(plan, phone)];
        memo.phoneHash = piiHash("phone", phone);
      }
      return { ok: true, value: { userId, cmd: { type, key, params }, memo } };
    }
    case "contact.read":
      return { ok: true, value: { userId, cmd: { type, key, params: { ids: ids(p.ids) } }, memo: {} } };
    case "contact.find_by_user_id":
      // The workflow's own user: nothing of the App's is needed, so a changed phone does not matter.
      if (!userId) return { ok: false, failure: { kind: "permanent", code: "invalid_params" } };
      return { ok: true, value: { userId, cmd: { type, key, params: { userId } }, memo: {} } };
    case "alert.add":
    case "alert.update":
    case "alert.get":
    case "alert.list":
    case "citizenship.list":
    case "contact.list_changed":
      // Parameters of these are safe as stored (masked alert fields, IDs, timestamps).
      return { ok: true, value: { userId, cmd: { type, key, params: p } as CrmCommand, memo: {} } };
    default:
      return { ok: false, failure: { kind: "permanent", code: "invalid_params" } };
  }
}

/**
 * A snapshot may hold the phone bitrix-sync wrote in a legacy form (v2, or plain SHA-256 from
 * before the hash key: src/hash.ts). Here both that hash and the Contact's numbers are at hand: the
 * entry it matches has its hash rewritten in the v3 form, so the update step, which compares the
 * entries' v3 hashes with the snapshot's, overwrites that entry instead of appending a second one.
 */
async function upgradeLegacyPhoneHash(tx: pg.PoolClient, c: ContactRecord): Promise<void> {
  const snap = await loadSnapshot(tx, String(c.id));
  if (!snap?.phoneHash || !isLegacyHash(snap.phoneHash)) return;
  const entry = c.phones.find((e) => matchesPiiHash(snap.phoneHash, "phone", e.value.trim()));
  const upgraded = entry ? piiHash("phone", entry.value.trim()) : null;
  if (upgraded) await snapshotPhone(tx, snap.contactId, snap.userId, upgraded);
}

function contactSummary(c: ContactRecord) {
  return {
    id: c.id,
    user_id: c.userId,
    registered: c.registered,
    created_at: c.createdAt,
    updated_at: c.updatedAt,
  };
}

/**
 * The safe projection of a successful result that has no side effects (no write to the App, the
 * snapshots or the alerts), or null when the command's result has some (projectResult then runs in
 * the completion transaction). The pump completes the former together with the rest of its batch,
 * in one statement.
 */
export function projectionOnly(
  row: CommandRow,
  result: CommandResults[CommandType],
  h: Hydrated,
): Record<string, unknown> | null {
  const memo = h.memo;
  switch (row.command_type) {
    case "contact.find_by_phone":
      return { contact_ids: (result as CommandResults["contact.find_by_phone"]).contactIds };
    case "contact.find_by_user_id":
      return { contact_ids: (result as CommandResults["contact.find_by_user_id"]).contactIds };
    case "contact.add":
      return {
        contact_id: (result as CommandResults["contact.add"]).contactId,
        written: {
          phone_hash: memo.phoneHash ?? null,
          name_hash: memo.nameHash ?? null,
          email_hash: memo.emailHash ?? null,
          citizenship_enum_id: memo.citizenshipEnumId ?? null,
        },
      };
    case "contact.read": {
      const purpose = row.params.purpose;
      if (purpose === "phones" || purpose === "apply") return null;
      return { contacts: (result as CommandResults["contact.read"]).contacts.map(contactSummary) };
    }
    default:
      return null;
  }
}

export interface HandlerContext {
  dictionary: CitizenshipDictionary;
}

/**
 * The safe projection of a successful result, computed in the completion transaction. Side effects
 * happen here too: CRM-master fields into the App (read, purpose apply), the phone hash of what was
 * written (update), the smart-process item of an alert.
 */
export async function projectResult(
  tx: pg.PoolClient,
  row: CommandRow,
  result: CommandResults[CommandType],
  h: Hydrated,
  ctx: HandlerContext,
): Promise<Record<string, unknown>> {
  const only = projectionOnly(row, result, h);
  if (only) return only;
  const memo = h.memo;
  switch (row.command_type) {
    case "contact.update":
      if (memo.phoneHash && h.userId)
        await snapshotPhone(tx, String(row.params.contact_id), h.userId, memo.phoneHash);
      return { updated: true, phone_hash: memo.phoneHash ?? null };
    case "contact.read": {
      const contacts = (result as CommandResults["contact.read"]).contacts;
      const purpose = row.params.purpose;
      if (purpose === "phones") {
        for (const c of contacts) await upgradeLegacyPhoneHash(tx, c);
        return {
          contacts: contacts.map((c) => ({
            ...contactSummary(c),
            // The entry type is kept so an overwrite does not change it; the number only as a hash.
            phones: c.phones.map((e) => ({
              id: e.id,
              type: e.valueType,
              hash: piiHash("phone", e.value.trim()),
            })),
          })),
        };
      }
      if (purpose === "apply") {
        const userId = h.userId;
        const c = contacts[0];
        if (!c || !userId) return { found: false };
        // Another user's id is a conflict for a person; an emptied one is put back by the step
        // (restore_flag), the link says whose Contact it is.
        if (c.userId !== null && c.userId !== userId)
          return { found: true, user_id_matches: false, registered: c.registered };
        // Whether the App's phone is still on the Contact (a manager may have removed it).
        const phoneHashes = c.phones.map((e) => piiHash("phone", e.value.trim()));
        // A link made by phone alone may be held (sql/mapping/held.sql): nothing reaches the App yet;
        // this read's time and CRM-master values (as one keyed hash) are what a robot webhook's read
        // is compared with. Only a held link's row is locked and read further; any other link finds
        // no row here.
        const { rows: hold } = await tx.query<{ hold: string }>(
          `select bitrix_sync.held_link_read(m.id, $3, false, $4) as hold from bitrix_sync.entity_external_mapping m
            where m.entity_id = $1 and m.external_id = $2 and m.status = 'active'
              and m.held_at is not null and m.hold_released_at is null`,
          [
            userId,
            String(c.id),
            c.updatedAt ? new Date(c.updatedAt) : null,
            heldValuesHash({ ...crmMasterValues(c), citizenshipEnumId: c.citizenshipEnumId }),
          ],
        );
        if (hold[0]?.hold === "held")
          return {
            found: true,
            user_id_matches: true,
            user_id_empty: c.userId === null,
            registered: c.registered,
            applied: false,
            held: true,
            phone_hashes: phoneHashes,
          };
        const applied = await applyCrmMaster(tx, userId, c, "app_create", ctx.dictionary);
        if (!applied.applied && !applied.stale) throw new BusinessFailure("unknown_citizenship");
        return {
          found: true,
          user_id_matches: true,
          user_id_empty: c.userId === null,
          registered: c.registered,
          applied: applied.applied,
          phone_hashes: phoneHashes,
        };
      }
      return { contacts: contacts.map(contactSummary) };
    }
    case "alert.add":
    case "alert.update":
    case "alert.get": {
      const item = (result as CommandResults["alert.add"]).item;
      if (row.alert_id) {
        await tx.query("select bitrix_sync.record_alert_item($1, $2, $3)", [
          row.alert_id,
          item.id,
          item.stageId,
        ]);
      }
      return { item_id: item.id, stage_id: item.stageId };
    }
    case "alert.list": {
      const items = (result as CommandResults["alert.list"]).items;
      if (row.alert_id && row.params.purpose === "find") {
        // The lookup of an alert's item (src/alerts/recover.ts): settles the add waiting for it.
        const { rows } = await tx.query<{ outcome: string }>(
          "select bitrix_sync.resolve_alert_lookup($1, $2) as outcome",
          [row.alert_id, JSON.stringify(items.map((i) => ({ id: i.id, stage_id: i.stageId })))],
        );
        return { item_ids: items.map((i) => i.id), outcome: rows[0]?.outcome ?? null };
      }
      return { item_ids: items.map((i) => i.id) };
    }
    default:
      return {};
  }
}
