// The closed catalogue of CRM command types (§2.5, §8): each type maps to one REST method with a
// minimal select, a parameter builder and a result parser. The database stores only the type name
// (bitrix_sync.crm_commands.command_type has a CHECK with exactly this set); method names live here.
import { toRestFieldName } from "../config/fields.js";
import {
  type CitizenshipList,
  type ContactFieldNames,
  type ContactRecord,
  type ContractForms,
  DOCUMENTED_FORMS,
  encodeRegistered,
  isValidRuPhone,
  type PhoneChange,
  parseCitizenshipList,
  parseLegacyContact,
} from "./contact-fields.js";
import type { ParamObject, ParamValue } from "./php-query.js";

/** Every command type, alphabetical. Must equal the CHECK on bitrix_sync.crm_commands.command_type. */
export const COMMAND_TYPES = [
  "alert.add",
  "alert.get",
  "alert.list",
  "alert.update",
  "citizenship.list",
  "contact.add",
  "contact.find_by_phone",
  "contact.find_by_user_id",
  "contact.list_changed",
  "contact.read",
  "contact.update",
] as const;
export type CommandType = (typeof COMMAND_TYPES)[number];

/** True for a string that names a catalogue command type. */
export function isCommandType(s: unknown): s is CommandType {
  return typeof s === "string" && (COMMAND_TYPES as readonly string[]).includes(s);
}

/** crm.duplicate.findbycomm takes at most 20 values per call (reference §4). */
export const MAX_PHONES_PER_SEARCH = 20;
/** crm.*.list pages are fixed at 50 rows (reference §5, §6): one command reads at most one page. */
export const PAGE_SIZE = 50;

/** A value a smart-process field may take. */
export type AlertFieldValue = string | number | boolean | null | Array<string | number>;

/** Parameters of each command type, as the workflows build them. */
export interface CommandParams {
  "alert.add": { entityTypeId: number; fields: Record<string, AlertFieldValue> };
  "alert.get": { entityTypeId: number; id: number };
  /**
   * Either the items with these IDs (`ids`), or the items whose `match.field` (a user field, or
   * `title`) equals `match.value`: the lookup of an unanswered alert.add (src/alerts/recover.ts).
   */
  "alert.list": {
    entityTypeId: number;
    ids?: number[];
    match?: { field: string; value: string | number };
  };
  "alert.update": { entityTypeId: number; id: number; fields: Record<string, AlertFieldValue> };
  "citizenship.list": Record<string, never>;
  "contact.add": {
    phone: string;
    userId: string;
    registered: boolean;
    name?: string | null;
    email?: string | null;
    citizenshipEnumId?: string | null;
  };
  "contact.find_by_phone": { phones: string[] };
  /** The Contacts whose integration user id field holds this App user id (a lost create's recovery). */
  "contact.find_by_user_id": { userId: string };
  /**
   * `updatedSince`: ISO 8601 with an offset (watermark minus overlap). Paging either by keyset
   * (`afterId`, no COUNT) or by offset (`start`, a multiple of 50: the reply carries `total`, so the
   * remaining pages can go out together in one batch). `opened`: the value sent for the open flag
   * (setting reconcile.opened_filter; the reference documents Y/N for system booleans).
   */
  "contact.list_changed": {
    updatedSince: string;
    afterId?: number;
    start?: number;
    opened?: "Y" | "N" | "1" | "0";
    /**
     * Also select the integration's user id field (the convergence audit's scan of registered
     * Contacts): the result then carries `rows`. With both `afterId` and `start`, the pages above
     * `afterId` are addressed by offset, so several go out in one batch.
     */
    withUserId?: boolean;
  };
  "contact.read": { ids: number[] };
  /**
   * Only App-master and integration fields (§3.1). `phones` comes from planPhoneUpdate, so existing
   * entries are overwritten by ID and a number is never appended twice.
   */
  "contact.update": {
    id: number;
    userId?: string | null;
    registered?: boolean;
    phones?: PhoneChange[];
  };
}

/** A smart-process item as the alert code needs it; `fields` keeps every returned field. */
export interface AlertItem {
  id: number;
  stageId: string | null;
  categoryId: number | null;
  updatedTime: string | null;
  fields: Record<string, unknown>;
}

/** Parsed result of each command type. */
export interface CommandResults {
  "alert.add": { item: AlertItem };
  "alert.get": { item: AlertItem };
  "alert.list": { items: AlertItem[] };
  "alert.update": { item: AlertItem };
  "citizenship.list": CitizenshipList;
  "contact.add": { contactId: number };
  /** At most 20 IDs, as the portal answers (the oldest matches when more exist). */
  "contact.find_by_phone": { contactIds: number[] };
  /** At most one page (50) of IDs, oldest first. */
  "contact.find_by_user_id": { contactIds: number[] };
  /**
   * `complete` is false when a full page came back: ask again with afterId = lastId (keyset) or the
   * next offset. `total` is the number of matches, present with offset paging only.
   */
  "contact.list_changed": {
    ids: number[];
    lastId: number | null;
    complete: boolean;
    total: number | null;
    /** With `withUserId`: each Contact with the user id it carries (null when empty). */
    rows?: Array<{ id: number; userId: string | null }>;
  };
  "contact.read": { contacts: ContactRecord[] };
  "contact.update": { updated: true };
}

/** One command to send: its type, its parameters, and the batch key it will travel under. */
export type CrmCommand = {
  [T in CommandType]: { type: T; params: CommandParams[T]; key?: string };
}[CommandType];

/**
 * What a builder needs besides the parameters: the portal's field names (§3.2) and the forms of the
 * contract the portal honours (settings contract.*; read at every build, so a new settings version
 * applies to the next command). Absent forms are the documented ones.
 */
export interface CatalogueContext {
  fields: ContactFieldNames;
  readonly forms?: ContractForms;
}

/** Thrown by a builder when the parameters cannot be sent; `code` feeds the classifier. */
export class CommandDataError extends Error {
  override name = "CommandDataError";
  constructor(
    readonly code: "invalid_phone" | "invalid_params",
    what: string,
  ) {
    super(`command parameters refused: ${what}`);
  }
}

/** Extra list metadata a parser may use (`total`/`next` of the envelope or result_total/next). */
export interface ListMeta {
  total?: number;
  next?: number;
}

interface Entry<T extends CommandType> {
  method: string;
  /** A create or update: a timeout after sending makes it uncertain (§7.2). */
  write: boolean;
  build(params: CommandParams[T], ctx: CatalogueContext): ParamObject;
  /** Returns null when the result does not have the documented shape. */
  parse(result: unknown, ctx: CatalogueContext, meta: ListMeta): CommandResults[T] | null;
}

const CONTACT_ENTITY_TYPE_ID = 3;
const ISO_WITH_OFFSET = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)$/;
const FIELD_KEY = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function positiveInt(n: unknown): n is number {
  return typeof n === "number" && Number.isInteger(n) && n > 0;
}

function ids(list: unknown, max: number, what: string): number[] {
  if (!Array.isArray(list) || list.length === 0 || list.length > max || !list.every(positiveInt)) {
    throw new CommandDataError("invalid_params", `${what} must be 1..${max} positive integers`);
  }
  return list;
}

function record(v: unknown): Record<string, unknown> | null {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

function intOrNull(v: unknown): number | null {
  const n = typeof v === "string" && v !== "" ? Number(v) : v;
  return typeof n === "number" && Number.isInteger(n) ? n : null;
}

/** Parses a crm.item.* item object. */
function parseAlertItem(v: unknown): AlertItem | null {
  const r = record(v);
  if (!r) return null;
  const id = intOrNull(r.id);
  if (id === null || id <= 0) return null;
  return {
    id,
    stageId: typeof r.stageId === "string" ? r.stageId : null,
    categoryId: intOrNull(r.categoryId),
    updatedTime: typeof r.updatedTime === "string" ? r.updatedTime : null,
    fields: r,
  };
}

function alertFields(fields: Record<string, AlertFieldValue>): ParamObject {
  const out: ParamObject = {};
  for (const [k, v] of Object.entries(fields)) {
    if (!FIELD_KEY.test(k))
      throw new CommandDataError("invalid_params", "alert field names must be identifiers");
    out[k] = v as ParamValue;
  }
  return out;
}

const SPA_USER_FIELD = /^ufCrm\d*_[A-Za-z0-9_]{1,60}$/;

function alertListFilter(p: CommandParams["alert.list"]): ParamObject {
  if (p.match !== undefined) {
    if (p.ids !== undefined)
      throw new CommandDataError("invalid_params", "alert.list takes ids or match, not both");
    const { field, value } = p.match;
    const okValue =
      (typeof value === "string" && value.length > 0 && value.length <= 128) ||
      (typeof value === "number" && Number.isSafeInteger(value));
    // A smart-process user field, or the item's title (it carries the alert number).
    if (typeof field !== "string" || !(field === "title" || SPA_USER_FIELD.test(field)) || !okValue) {
      throw new CommandDataError(
        "invalid_params",
        "alert.list match needs the title or a user field, and a value",
      );
    }
    return { [field]: value };
  }
  return { "@id": ids(p.ids, PAGE_SIZE, "ids") };
}

function entityTypeId(n: unknown): number {
  if (!positiveInt(n))
    throw new CommandDataError("invalid_params", "entityTypeId must be a positive integer");
  return n;
}

function formsOf(ctx: CatalogueContext): ContractForms {
  return ctx.forms ?? DOCUMENTED_FORMS;
}

/** The portal widest west of UTC reads a time without an offset 12 hours behind it (UTC-12). */
const WIDEST_WEST_MS = 12 * 3600_000;

/**
 * The `>=updatedTime` value for an instant written ISO 8601 with an offset: as it is ("offset"), or
 * without an offset and 12 hours earlier ("no_offset"), so that the instant the portal reads, in any
 * time zone from UTC-12 to UTC+14, is never after the one asked for (the window widens by up to
 * 26 hours; reconciliation reads those Contacts again and finds them unchanged).
 */
export function updatedSinceValue(since: string, form: ContractForms["dateFilter"]): string {
  if (form === "offset") return since.replace(/Z$/, "+00:00");
  return new Date(Date.parse(since) - WIDEST_WEST_MS).toISOString().slice(0, 19);
}

/** Normalises an instant to the portal's documented filter form: seconds and a numeric offset. */
export function toPortalTimestamp(d: Date): string {
  return `${d.toISOString().slice(0, 19)}+00:00`;
}

const CATALOGUE: { [T in CommandType]: Entry<T> } = {
  "alert.add": {
    method: "crm.item.add",
    write: true,
    build: (p) => ({ entityTypeId: entityTypeId(p.entityTypeId), fields: alertFields(p.fields) }),
    parse: (r) => {
      const item = parseAlertItem(record(r)?.item);
      return item ? { item } : null;
    },
  },
  "alert.get": {
    method: "crm.item.get",
    write: false,
    build: (p) => ({ entityTypeId: entityTypeId(p.entityTypeId), id: ids([p.id], 1, "id")[0] as number }),
    parse: (r) => {
      const item = parseAlertItem(record(r)?.item);
      return item ? { item } : null;
    },
  },
  "alert.list": {
    method: "crm.item.list",
    write: false,
    build: (p) => ({
      entityTypeId: entityTypeId(p.entityTypeId),
      select: ["id", "stageId", "categoryId", "updatedTime"],
      filter: alertListFilter(p),
      order: { id: "ASC" },
      start: -1,
    }),
    parse: (r) => {
      const items = record(r)?.items;
      if (!Array.isArray(items)) return null;
      const parsed = items.map(parseAlertItem);
      return parsed.every((i) => i !== null) ? { items: parsed as AlertItem[] } : null;
    },
  },
  "alert.update": {
    method: "crm.item.update",
    write: true,
    build: (p) => ({
      entityTypeId: entityTypeId(p.entityTypeId),
      id: ids([p.id], 1, "id")[0] as number,
      fields: alertFields(p.fields),
    }),
    parse: (r) => {
      const item = parseAlertItem(record(r)?.item);
      return item ? { item } : null;
    },
  },
  "citizenship.list": {
    method: "crm.contact.userfield.list",
    write: false,
    build: (_p, ctx) => ({ filter: { FIELD_NAME: ctx.fields.citizenship } }),
    parse: (r, ctx) => {
      return parseCitizenshipList(r, ctx.fields.citizenship);
    },
  },
  "contact.add": {
    method: "crm.contact.add",
    write: true,
    build: (p, ctx) => {
      if (!isValidRuPhone(p.phone)) throw new CommandDataError("invalid_phone", "phone is not +7XXXXXXXXXX");
      if (!UUID.test(p.userId)) throw new CommandDataError("invalid_params", "userId must be a UUID");
      const fields: ParamObject = {
        PHONE: [{ VALUE: p.phone, VALUE_TYPE: "MOBILE" }],
        [ctx.fields.userId]: p.userId,
        [ctx.fields.registered]: encodeRegistered(p.registered, formsOf(ctx).registeredWrite),
      };
      if (p.name) fields.NAME = p.name;
      if (p.email) fields.EMAIL = [{ VALUE: p.email, VALUE_TYPE: "WORK" }];
      if (p.citizenshipEnumId) fields[ctx.fields.citizenship] = p.citizenshipEnumId;
      return { fields, params: { REGISTER_SONET_EVENT: "N" } };
    },
    parse: (r) => {
      const id = intOrNull(r);
      return id !== null && id > 0 ? { contactId: id } : null;
    },
  },
  "contact.find_by_phone": {
    method: "crm.duplicate.findbycomm",
    write: false,
    build: (p) => {
      if (!Array.isArray(p.phones) || p.phones.length === 0 || p.phones.length > MAX_PHONES_PER_SEARCH) {
        throw new CommandDataError("invalid_params", `phones must hold 1..${MAX_PHONES_PER_SEARCH} numbers`);
      }
      if (!p.phones.every(isValidRuPhone)) {
        throw new CommandDataError("invalid_phone", "phone is not +7XXXXXXXXXX");
      }
      return { entity_type: "CONTACT", type: "PHONE", values: p.phones };
    },
    parse: (r) => {
      // Nothing found is an empty array, not an object (reference §4).
      if (Array.isArray(r)) return r.length === 0 ? { contactIds: [] } : null;
      const rec = record(r);
      if (!rec) return null;
      const list = rec.CONTACT ?? [];
      if (!Array.isArray(list)) return null;
      const out = list.map(intOrNull);
      return out.every((n) => n !== null && n > 0) ? { contactIds: out as number[] } : null;
    },
  },
  "contact.find_by_user_id": {
    method: "crm.contact.list",
    write: false,
    // The legacy list filters by the user field's physical name (UF_CRM_...), as contact.read selects it.
    build: (p, ctx) => {
      if (typeof p.userId !== "string" || !UUID.test(p.userId)) {
        throw new CommandDataError("invalid_params", "userId must be a UUID");
      }
      return { select: ["ID"], filter: { [ctx.fields.userId]: p.userId }, order: { ID: "ASC" } };
    },
    parse: (r) => {
      if (!Array.isArray(r)) return null;
      const out = r.map((row) => intOrNull(record(row)?.ID));
      return out.every((n) => n !== null && n > 0) ? { contactIds: out as number[] } : null;
    },
  },
  "contact.list_changed": {
    method: "crm.item.list",
    write: false,
    build: (p, ctx) => {
      if (typeof p.updatedSince !== "string" || !ISO_WITH_OFFSET.test(p.updatedSince)) {
        throw new CommandDataError("invalid_params", "updatedSince must be ISO 8601 with an offset");
      }
      if (p.afterId !== undefined && !(Number.isInteger(p.afterId) && p.afterId >= 0)) {
        throw new CommandDataError("invalid_params", "afterId must be a non-negative integer");
      }
      if (
        p.start !== undefined &&
        !(Number.isInteger(p.start) && p.start >= 0 && p.start % PAGE_SIZE === 0)
      ) {
        throw new CommandDataError("invalid_params", "start must be a non-negative multiple of 50");
      }
      if (p.opened !== undefined && !["Y", "N", "1", "0"].includes(p.opened)) {
        throw new CommandDataError("invalid_params", "opened must be Y, N, 1 or 0");
      }
      // §10.2 with two reference corrections: a boolean UF filters as 1 (not Y), a system boolean
      // such as `opened` as Y (1 is undocumented; the value is a checked setting). The flag's and the
      // date's forms are settings too (contract.*), confirmed by preflight's write probe. Keyset
      // paging with start=-1 skips the COUNT; offset paging returns `total` so the other pages can
      // be batched.
      const forms = formsOf(ctx);
      const filter: ParamObject = {
        ">=updatedTime": updatedSinceValue(p.updatedSince, forms.dateFilter),
        opened: p.opened ?? "Y",
        [toRestFieldName(ctx.fields.registered)]: forms.registeredFilter === "Y" ? "Y" : 1,
      };
      if (p.afterId !== undefined || p.start === undefined) filter[">id"] = p.afterId ?? 0;
      const userField = toRestFieldName(ctx.fields.userId);
      return {
        entityTypeId: CONTACT_ENTITY_TYPE_ID,
        select: p.withUserId === true ? ["id", userField] : ["id"],
        filter,
        order: { id: "ASC" },
        start: p.start ?? -1,
      };
    },
    parse: (r, ctx, meta) => {
      const items = record(r)?.items;
      if (!Array.isArray(items)) return null;
      const list = items.map((i) => intOrNull(record(i)?.id));
      if (!list.every((n) => n !== null && n > 0)) return null;
      const idsOut = list as number[];
      const userField = toRestFieldName(ctx.fields.userId);
      const out: CommandResults["contact.list_changed"] = {
        ids: idsOut,
        lastId: idsOut.length > 0 ? Math.max(...idsOut) : null,
        complete: idsOut.length < PAGE_SIZE,
        // With start=-1 the portal skips the COUNT and answers total 0 (reference §6): a total
        // smaller than the rows returned is "not counted", not a count.
        total: meta.total !== undefined && meta.total >= idsOut.length ? meta.total : null,
      };
      // The user id field is in the reply only when it was selected.
      if (items.some((i) => record(i) !== null && userField in (record(i) as Record<string, unknown>))) {
        out.rows = items.map((i, n) => {
          const v = record(i)?.[userField];
          const userId = typeof v === "string" && v.trim() !== "" ? v.trim() : null;
          return { id: idsOut[n] as number, userId };
        });
      }
      return out;
    },
  },
  "contact.read": {
    method: "crm.contact.list",
    write: false,
    // The legacy list is the one documented way to get PHONE/EMAIL with their entry IDs while naming
    // every selected field; crm.item.list returns multifields only with select=* (reference §6).
    build: (p, ctx) => ({
      select: [
        "ID",
        "NAME",
        "PHONE",
        "EMAIL",
        "DATE_CREATE",
        "DATE_MODIFY",
        ctx.fields.userId,
        ctx.fields.registered,
        ctx.fields.citizenship,
      ],
      filter: { "@ID": ids(p.ids, PAGE_SIZE, "ids") },
      order: { ID: "ASC" },
    }),
    parse: (r, ctx) => {
      if (!Array.isArray(r)) return null;
      const contacts = r.map((row) => parseLegacyContact(row, ctx.fields));
      return contacts.every((c) => c !== null) ? { contacts: contacts as ContactRecord[] } : null;
    },
  },
  "contact.update": {
    method: "crm.contact.update",
    write: true,
    build: (p, ctx) => {
      const id = ids([p.id], 1, "id")[0] as number;
      const fields: ParamObject = {};
      if (p.userId !== undefined) {
        if (p.userId !== null && !UUID.test(p.userId)) {
          throw new CommandDataError("invalid_params", "userId must be a UUID or null");
        }
        fields[ctx.fields.userId] = p.userId ?? "";
      }
      if (p.registered !== undefined)
        fields[ctx.fields.registered] = encodeRegistered(p.registered, formsOf(ctx).registeredWrite);
      if (p.phones !== undefined && p.phones.length > 0) {
        if (!p.phones.every((ph) => isValidRuPhone(ph.VALUE))) {
          throw new CommandDataError("invalid_phone", "phone is not +7XXXXXXXXXX");
        }
        fields.PHONE = p.phones.map((ph) => ({ ...ph }));
      }
      if (Object.keys(fields).length === 0) throw new CommandDataError("invalid_params", "nothing to update");
      return { id, fields, params: { REGISTER_SONET_EVENT: "N" } };
    },
    parse: (r) => (r === true ? { updated: true } : null),
  },
};

/** REST method of a command type. */
export function methodOf(type: CommandType): string {
  return CATALOGUE[type].method;
}

/** True when the command creates or changes CRM data. */
export function isWrite(type: CommandType): boolean {
  return CATALOGUE[type].write;
}

/** Builds a command's REST method and parameters; throws CommandDataError on bad parameters. */
export function buildRequest(
  cmd: CrmCommand,
  ctx: CatalogueContext,
): { method: string; params: ParamObject } {
  const entry = CATALOGUE[cmd.type] as Entry<CommandType>;
  return { method: entry.method, params: entry.build(cmd.params as never, ctx) };
}

/** Parses one command's result; null when it does not have the documented shape. */
export function parseResult<T extends CommandType>(
  type: T,
  result: unknown,
  ctx: CatalogueContext,
  meta: ListMeta = {},
): CommandResults[T] | null {
  const entry = CATALOGUE[type] as Entry<T>;
  try {
    return entry.parse(result, ctx, meta);
  } catch {
    return null;
  }
}
