// Contact field rules (§3.3): phones only as +7XXXXXXXXXX and never repaired, the email pick rule,
// multifield updates that reuse existing IDs (reference §5: an item without ID is appended, so
// re-sending a phone without its ID duplicates it), the registration flag's wire form, and the
// citizenship dictionary with a TTL cache that refreshes once on an unknown enum ID.

/** Russian E.164 exactly: `+7` and ten digits. Anything else is a business error, never repaired. */
const RU_PHONE = /^\+7\d{10}$/;

/** True when `s` is a phone the service may send or search for. */
export function isValidRuPhone(s: unknown): s is string {
  return typeof s === "string" && RU_PHONE.test(s);
}

// Deliberately plain: one @, no spaces, a dot in the domain, labels not empty. The CRM stores
// whatever a manager typed; this only keeps obvious junk out of the App.
const EMAIL = /^[^\s@]+@[^\s@.]+(\.[^\s@.]+)+$/;

/** True when `s` is syntactically an email address (and at most 254 characters). */
export function isValidEmail(s: unknown): s is string {
  return typeof s === "string" && s.length <= 254 && EMAIL.test(s);
}

/** One entry of a Contact multifield (PHONE, EMAIL) as read back, with the portal's entry ID. */
export interface MultiValue {
  id: number | null;
  valueType: string;
  value: string;
}

/** §3.3: the first valid address whose VALUE_TYPE is WORK, else the first valid one, else null. */
export function pickEmail(entries: readonly MultiValue[]): string | null {
  const valid = entries.filter((e) => isValidEmail(e.value.trim()));
  const work = valid.find((e) => e.valueType.toUpperCase() === "WORK");
  return (work ?? valid[0])?.value.trim() ?? null;
}

/** A multifield entry as crm.contact.update expects it: with ID to overwrite, without to append. */
export interface PhoneChange {
  ID?: string;
  VALUE: string;
  VALUE_TYPE: string;
}

/** Which PHONE entry to write: one overwritten by its ID (keeping its type), or a new one appended. */
export type PhonePlan = { entryId: number; valueType: string } | { append: true };

/**
 * The phone rule (§3.3, reference §5): what to write so that the Contact carries `desired`, or null
 * when it already does. Overwrites the entry holding `previous` (the number bitrix-sync wrote last)
 * by its ID and keeps that entry's VALUE_TYPE; appends only when the Contact has neither number.
 * Other numbers a manager added are left alone. Values are compared exactly as given, so the
 * workflow, which may store no phone number, passes SHA-256 hashes for the entries, `desired` and
 * `previous` alike; the number itself is filled in at send time by `phoneChange`.
 */
export function planPhoneUpdate(
  existing: readonly MultiValue[],
  desired: string,
  previous?: string | null,
): PhonePlan | null {
  if (existing.some((e) => e.value === desired)) return null;
  const old = previous ? existing.find((e) => e.value === previous && e.id !== null) : undefined;
  if (old && old.id !== null) return { entryId: old.id, valueType: old.valueType || "MOBILE" };
  return { append: true };
}

/** The PHONE entry crm.contact.update gets for a plan and the App's number; a new entry is MOBILE. */
export function phoneChange(plan: PhonePlan, phone: string): PhoneChange {
  if (!isValidRuPhone(phone)) throw new RangeError("phone is not +7XXXXXXXXXX");
  return "entryId" in plan
    ? { ID: String(plan.entryId), VALUE: phone, VALUE_TYPE: plan.valueType }
    : { VALUE: phone, VALUE_TYPE: "MOBILE" };
}

/**
 * The forms of the portal's REST contract that the reference leaves open (§6, §9), as the settings
 * `contract.*` name them; `npm run preflight -- --write` establishes which a portal honours
 * (docs/decisions.md). Absent, the documented forms apply (DOCUMENTED_FORMS).
 */
export interface ContractForms {
  /** contract.registered_write: the flag written as 1/0 ("1") or "Y"/"N" ("Y"). */
  registeredWrite: "1" | "Y";
  /** contract.registered_filter: the flag filtered as 1 ("1") or "Y" ("Y"). */
  registeredFilter: "1" | "Y";
  /**
   * contract.date_filter: `>=updatedTime` sent with an offset ("offset", the documented form), or
   * without one and 12 hours earlier ("no_offset": whatever time zone the portal reads it in, from
   * UTC-12 to UTC+14, the window only widens, by up to 26 hours).
   */
  dateFilter: "offset" | "no_offset";
}

/** The forms the reference documents (§6: a boolean user field filters as 1; dates carry an offset). */
export const DOCUMENTED_FORMS: Readonly<ContractForms> = {
  registeredWrite: "1",
  registeredFilter: "1",
  dateFilter: "offset",
};

/**
 * The registration flag as written through crm.contact.add/update: 1/0 by default, or "Y"/"N" where
 * the portal takes only that (setting contract.registered_write). Kept in one place so the portal's
 * form never reaches workflow logic (§10.2).
 */
export function encodeRegistered(
  active: boolean,
  form: ContractForms["registeredWrite"] = DOCUMENTED_FORMS.registeredWrite,
): 1 | 0 | "Y" | "N" {
  if (form === "Y") return active ? "Y" : "N";
  return active ? 1 : 0;
}

/** Reads a boolean user field in any of the forms the portal uses (1/0, "Y"/"N", true/false). */
export function decodeRegistered(v: unknown): boolean | null {
  if (v === true || v === 1 || v === "1" || v === "Y" || v === "y") return true;
  if (v === false || v === 0 || v === "0" || v === "N" || v === "n") return false;
  return null;
}

function parseMulti(v: unknown): MultiValue[] {
  if (!Array.isArray(v)) return [];
  const out: MultiValue[] = [];
  for (const e of v) {
    if (e === null || typeof e !== "object") continue;
    const r = e as Record<string, unknown>;
    const value = r.VALUE ?? r.value;
    if (typeof value !== "string") continue;
    const rawId = r.ID ?? r.id;
    const id = rawId === undefined || rawId === null || rawId === "" ? null : Number(rawId);
    const valueType = r.VALUE_TYPE ?? r.valueType;
    out.push({
      id: id !== null && Number.isInteger(id) ? id : null,
      valueType: typeof valueType === "string" ? valueType : "",
      value,
    });
  }
  return out;
}

/** The physical (UF_CRM_<digits>) names of the integration's three Contact fields. */
export interface ContactFieldNames {
  userId: string;
  registered: string;
  citizenship: string;
}

/** A Contact as the workflows need it: the CRM-master fields plus the integration's own. */
export interface ContactRecord {
  id: number;
  name: string | null;
  phones: MultiValue[];
  emails: MultiValue[];
  /** App user UUID written by the integration, or null. */
  userId: string | null;
  registered: boolean | null;
  /** Enumeration element ID of the citizenship list, or null when empty. */
  citizenshipEnumId: string | null;
  /** Portal timestamps exactly as received (ISO 8601 with offset). */
  createdAt: string | null;
  updatedAt: string | null;
}

function text(v: unknown): string | null {
  if (typeof v === "number") return String(v);
  if (typeof v !== "string") return null;
  return v === "" ? null : v;
}

/**
 * Parses one row of crm.contact.list / crm.contact.get (legacy UPPER_CASE names). Returns null when
 * the row has no usable ID, so a malformed reply is classified rather than crashing.
 */
export function parseLegacyContact(row: unknown, names: ContactFieldNames): ContactRecord | null {
  if (row === null || typeof row !== "object" || Array.isArray(row)) return null;
  const r = row as Record<string, unknown>;
  const id = Number(r.ID);
  if (!Number.isInteger(id) || id <= 0) return null;
  const citizenship = r[names.citizenship];
  return {
    id,
    name: text(r.NAME),
    phones: parseMulti(r.PHONE),
    emails: parseMulti(r.EMAIL),
    userId: text(r[names.userId]),
    registered: decodeRegistered(r[names.registered]),
    citizenshipEnumId: Array.isArray(citizenship) ? text(citizenship[0]) : text(citizenship),
    createdAt: text(r.DATE_CREATE),
    updatedAt: text(r.DATE_MODIFY),
  };
}

/** One element of the citizenship enumeration. */
export interface CitizenshipItem {
  /** Element ID as the portal writes it into the Contact field. */
  id: string;
  /** Display value: what the App shows and stores. */
  value: string;
  xmlId: string | null;
  sort: number | null;
}

/** Result of resolving an enum ID. `loadedAt` goes into the sync snapshot (§3.3). */
export type CitizenshipLookup =
  | { found: true; item: CitizenshipItem; loadedAt: number }
  | { found: false; loadedAt: number };

/** What crm.contact.userfield.list said about the configured citizenship field. */
export interface CitizenshipList {
  /** "missing": the portal has no such Contact field (deleted or renamed by a CRM admin). */
  field: "present" | "missing";
  items: CitizenshipItem[];
}

/**
 * The dictionary's condition, as readiness, metrics and logs report it: `ready` (a list with
 * elements), `list_empty` and `field_missing` (a read that succeeded but gives nothing to map: cached
 * for the TTL like a list), `unavailable` (the read failed and nothing was ever read; retried with
 * backoff), `unknown` (not read yet).
 */
export type CitizenshipDictionaryState = "unknown" | "ready" | "list_empty" | "field_missing" | "unavailable";

export const CITIZENSHIP_DICTIONARY_STATES: readonly CitizenshipDictionaryState[] = [
  "unknown",
  "ready",
  "list_empty",
  "field_missing",
  "unavailable",
];

/** What the dictionary reports after every read of the portal's list. */
export interface CitizenshipDictionaryStatus {
  state: CitizenshipDictionaryState;
  /** Elements in the cached list (0 when none is cached). */
  items: number;
  /** When the list in use was read (epoch ms), or null. */
  loadedAt: number | null;
  /** The read's outcome: the state it led to, or "failed". */
  outcome: Exclude<CitizenshipDictionaryState, "unknown" | "unavailable"> | "failed";
  /** The failed read's error, when outcome is "failed". */
  error?: unknown;
  /** When the next read may happen after a failure (epoch ms). */
  retryAt?: number;
}

export interface CitizenshipDictionary {
  /** Resolves an enum ID; an unknown ID triggers one refresh before it is reported unknown. */
  resolve(id: string): Promise<CitizenshipLookup>;
  /** The element whose display value equals `value` (after trimming), for the initial create. */
  findByValue(value: string): Promise<CitizenshipItem | null>;
  /** Forgets the cache; the next call loads again. */
  invalidate(): void;
  /** The condition after the last read (no read happens here). */
  state(): CitizenshipDictionaryState;
}

export interface CitizenshipDictionaryOptions {
  /** Loads the list from the CRM (the `citizenship.list` command). */
  load: () => Promise<CitizenshipList>;
  /** Cache lifetime (setting citizenship.cache_ttl_sec, default 3600 s); read at every look. */
  ttlMs: number | (() => number);
  /**
   * An unknown ID refreshes the list at most this often, so a Contact with a bad value cannot make
   * every read reload the dictionary; also the first wait after a failed read (it doubles up to the
   * TTL). Default 30 s.
   */
  minRefreshIntervalMs?: number;
  /** Called after every read of the portal's list (success or failure). */
  onRead?: (status: CitizenshipDictionaryStatus) => void;
  now?: () => number;
}

/** Unknown IDs remembered at once; past it the oldest are forgotten (and may refresh again). */
const MAX_REMEMBERED_UNKNOWN = 10_000;

/**
 * A TTL-cached citizenship dictionary (§3.3). Rules, whatever the portal answers:
 * - one read per TTL: a list, an empty list and a missing field are all cached for the TTL;
 * - an unknown enum ID refreshes the list once per ID per TTL, and at most once per
 *   `minRefreshIntervalMs` whatever the IDs;
 * - a failed read keeps the list in use (if any) and is retried after 30 s, doubling up to the TTL;
 * - concurrent lookups share one read.
 */
export function createCitizenshipDictionary(opts: CitizenshipDictionaryOptions): CitizenshipDictionary {
  const now = opts.now ?? Date.now;
  const minRefresh = opts.minRefreshIntervalMs ?? 30_000;
  const ttl = typeof opts.ttlMs === "function" ? opts.ttlMs : () => opts.ttlMs as number;
  interface Cache {
    byId: Map<string, CitizenshipItem>;
    items: CitizenshipItem[];
    loadedAt: number;
    state: "ready" | "list_empty" | "field_missing";
  }
  let cache: Cache | null = null;
  let loading: Promise<Cache> | null = null;
  let failures = 0;
  let retryAt = 0;
  let lastError: unknown = null;
  /** Unknown ID -> when it last caused a refresh. */
  const refreshedFor = new Map<string, number>();

  function report(status: CitizenshipDictionaryStatus): void {
    try {
      opts.onRead?.(status);
    } catch {
      // Reporting never breaks a lookup.
    }
  }

  function load(): Promise<Cache> {
    loading ??= opts
      .load()
      .then((list) => {
        const state =
          list.field === "missing" ? "field_missing" : list.items.length === 0 ? "list_empty" : "ready";
        const c: Cache = {
          byId: new Map(list.items.map((i) => [i.id, i])),
          items: list.items,
          loadedAt: now(),
          state,
        };
        cache = c;
        failures = 0;
        retryAt = 0;
        lastError = null;
        report({ state, items: c.items.length, loadedAt: c.loadedAt, outcome: state });
        return c;
      })
      .catch((e: unknown) => {
        failures++;
        lastError = e;
        retryAt = now() + Math.min(ttl(), minRefresh * 2 ** Math.min(failures - 1, 20));
        report({
          state: cache ? cache.state : "unavailable",
          items: cache?.items.length ?? 0,
          loadedAt: cache?.loadedAt ?? null,
          outcome: "failed",
          error: e,
          retryAt,
        });
        // The list in use (if any) stays in use until a read succeeds.
        if (cache) return cache;
        throw e;
      })
      .finally(() => {
        loading = null;
      });
    return loading;
  }

  async function fresh(): Promise<Cache> {
    if (loading) return await loading;
    const t = now();
    if (cache && t - cache.loadedAt < ttl()) return cache;
    if (failures > 0 && t < retryAt) {
      if (cache) return cache;
      throw lastError;
    }
    return await load();
  }

  /** Whether an unknown ID may refresh the list now (and remembers that it did). */
  function mayRefreshFor(id: string, c: Cache): boolean {
    const t = now();
    if (t - c.loadedAt < minRefresh) return false;
    if (failures > 0 && t < retryAt) return false;
    const last = refreshedFor.get(id);
    if (last !== undefined && t - last < ttl()) return false;
    refreshedFor.delete(id);
    refreshedFor.set(id, t);
    if (refreshedFor.size > MAX_REMEMBERED_UNKNOWN) {
      const oldest = refreshedFor.keys().next().value;
      if (oldest !== undefined) refreshedFor.delete(oldest);
    }
    return true;
  }

  return {
    async resolve(id) {
      let c = await fresh();
      let item = c.byId.get(id);
      if (!item && mayRefreshFor(id, c)) {
        c = await load();
        item = c.byId.get(id);
      }
      return item ? { found: true, item, loadedAt: c.loadedAt } : { found: false, loadedAt: c.loadedAt };
    },
    async findByValue(value) {
      const c = await fresh();
      const v = value.trim();
      return c.items.find((i) => i.value.trim() === v) ?? null;
    },
    invalidate() {
      cache = null;
      failures = 0;
      retryAt = 0;
    },
    state() {
      if (cache) return cache.state;
      return failures > 0 ? "unavailable" : "unknown";
    },
  };
}

/**
 * Parses crm.contact.userfield.list's answer (filtered by FIELD_NAME) for one enumeration field.
 * An array without that field means the portal has no such field (`[]` is Bitrix's empty result);
 * anything but an array is malformed (null).
 */
export function parseCitizenshipList(result: unknown, fieldName: string): CitizenshipList | null {
  if (!Array.isArray(result)) return null;
  const field = result.find(
    (f) => f !== null && typeof f === "object" && (f as Record<string, unknown>).FIELD_NAME === fieldName,
  ) as Record<string, unknown> | undefined;
  if (!field) return { field: "missing", items: [] };
  const list = field.LIST;
  if (!Array.isArray(list)) return { field: "present", items: [] };
  const out: CitizenshipItem[] = [];
  for (const e of list) {
    if (e === null || typeof e !== "object") continue;
    const r = e as Record<string, unknown>;
    const id = text(r.ID);
    const value = typeof r.VALUE === "string" ? r.VALUE : null;
    if (id === null || value === null) continue;
    const sort = Number(r.SORT);
    out.push({ id, value, xmlId: text(r.XML_ID), sort: Number.isFinite(sort) ? sort : null });
  }
  return { field: "present", items: out };
}
