// REST methods of the emulated portal. Each handler takes the request's params (already decoded from
// JSON, a form body or a batch sub-request's query string, so numbers may arrive as strings) and
// answers a result or an error the way the reference documents it.
import {
  formatPortalTime,
  type PortalStore,
  parsePortalTime,
  phoneKey,
  type StoredContact,
  type StoredItem,
  type StoredMulti,
  ufRestName,
} from "./store.js";

/** A method's answer before it is wrapped in an envelope (or a batch's maps). */
export type MethodReply =
  | { ok: true; result: unknown; total?: number; next?: number }
  | { ok: false; status: number; error: string; description: string };

export type MethodHandler = (params: Record<string, unknown>, store: PortalStore) => MethodReply;

const PAGE = 50;
const CONTACT_TYPE_ID = 3;

function fail(status: number, error: string, description: string): MethodReply {
  return { ok: false, status, error, description };
}

/** Legacy methods take parameter names case-insensitively (reference §1). */
function param(params: Record<string, unknown>, name: string): unknown {
  if (name in params) return params[name];
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(params)) if (k.toLowerCase() === lower) return v;
  return undefined;
}

function toInt(v: unknown): number | null {
  const n = typeof v === "string" && v.trim() !== "" ? Number(v) : v;
  return typeof n === "number" && Number.isInteger(n) ? n : null;
}

function obj(v: unknown): Record<string, unknown> | null {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

/** A PHP array arrives as a JSON array or as an object with n0/0/1 keys: take the values in order. */
function entries(v: unknown): unknown[] {
  if (Array.isArray(v)) return v;
  const o = obj(v);
  return o ? Object.values(o) : [];
}

function str(v: unknown): string {
  return typeof v === "string" ? v : typeof v === "number" ? String(v) : "";
}

// ---------------------------------------------------------------------------------------------
// Filters and ordering (reference §5, §6)
// ---------------------------------------------------------------------------------------------

type Kind = "int" | "string" | "date" | "sysbool" | "ufbool" | "enum" | "multi";
interface FieldSpec<R> {
  kind: Kind;
  get(row: R): unknown;
}
type Specs<R> = Record<string, FieldSpec<R>>;

const OPS = ["!@", "!=", ">=", "<=", "=%", "%=", "!%", ">", "<", "@", "%", "=", "!"] as const;
type Op = (typeof OPS)[number];

function splitKey(key: string): { op: Op; field: string } {
  for (const op of OPS) if (key.startsWith(op)) return { op, field: key.slice(op.length) };
  return { op: "=", field: key };
}

function compareValue(kind: Kind, stored: unknown, wanted: unknown, store: PortalStore): number | null {
  switch (kind) {
    case "int": {
      const a = toInt(stored);
      const b = toInt(wanted);
      return a === null || b === null ? null : a - b;
    }
    case "date": {
      const a = typeof stored === "number" ? stored : null;
      const b = parsePortalTime(wanted, store.utcOffsetMinutes);
      return a === null || b === null ? null : a - b;
    }
    case "sysbool":
      // System booleans filter as Y/N; 1/0 is undocumented for them (reference §6), so it matches
      // nothing here, which makes a wrong encoding visible in tests.
      if (wanted !== "Y" && wanted !== "N") return null;
      return (stored ? "Y" : "N") === wanted ? 0 : 1;
    case "ufbool": {
      // Boolean user fields filter as 1/0; Y/N "is not supported" (reference §6): matches nothing.
      // A portal of the other kind (PortalContract.booleanFilter "Y/N") matches Y/N only.
      const w =
        store.contract.booleanFilter === "Y/N"
          ? wanted === "Y"
            ? 1
            : wanted === "N"
              ? 0
              : null
          : wanted === 1 || wanted === "1" || wanted === true
            ? 1
            : wanted === 0 || wanted === "0"
              ? 0
              : null;
      if (w === null) return null;
      return (stored === 1 ? 1 : 0) === w ? 0 : 1;
    }
    case "enum":
    case "string": {
      const a = stored === null || stored === undefined ? "" : String(stored);
      const b = str(wanted);
      return a === b ? 0 : a < b ? -1 : 1;
    }
    case "multi": {
      const list = stored as StoredMulti[];
      return list.some((m) => m.value === str(wanted)) ? 0 : 1;
    }
  }
}

function matchOne<R>(spec: FieldSpec<R>, op: Op, wanted: unknown, row: R, store: PortalStore): boolean {
  const stored = spec.get(row);
  if (op === "@" || op === "!@") {
    const list = Array.isArray(wanted) ? wanted : entries(wanted).length > 0 ? entries(wanted) : [wanted];
    const hit = list.some((w) => compareValue(spec.kind, stored, w, store) === 0);
    return op === "@" ? hit : !hit;
  }
  if (op === "%" || op === "=%" || op === "%=" || op === "!%") {
    const a = String(stored ?? "").toLowerCase();
    const b = str(wanted).toLowerCase();
    const hit = op === "=%" ? a.startsWith(b) : op === "%=" ? a.endsWith(b) : a.includes(b);
    return op === "!%" ? !hit : hit;
  }
  const c = compareValue(spec.kind, stored, wanted, store);
  if (op === "!=" || op === "!") return c !== 0;
  if (c === null) return false;
  switch (op) {
    case "=":
      return c === 0;
    case ">":
      return c > 0;
    case ">=":
      return c >= 0;
    case "<":
      return c < 0;
    case "<=":
      return c <= 0;
  }
}

/** A date value written with an offset or Z (2024-01-01T00:00:00+03:00), not in local time. */
function hasOffset(v: unknown): boolean {
  return typeof v === "string" && /T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/i.test(v.trim());
}

function compileFilter<R>(
  filter: unknown,
  specs: Specs<R>,
  store: PortalStore,
  errorCode: string,
): ((row: R) => boolean) | MethodReply {
  const f = obj(filter) ?? {};
  const tests: Array<(row: R) => boolean> = [];
  for (const [key, wanted] of Object.entries(f)) {
    const { op, field } = splitKey(key);
    const spec = specs[field];
    if (!spec) return fail(400, errorCode, `Invalid filter: field '${field}' is not allowed`);
    // A portal that ignores a date filter whose value carries an offset (PortalContract) drops it.
    if (spec.kind === "date" && store.contract.dateFilterWithOffset === "ignored" && hasOffset(wanted))
      continue;
    tests.push((row) => matchOne(spec, op, wanted, row, store));
  }
  return (row) => tests.every((t) => t(row));
}

function sortRows<R>(rows: R[], order: unknown, specs: Specs<R>, idField: string, store: PortalStore): R[] {
  const o = obj(order);
  const keys = o && Object.keys(o).length > 0 ? Object.entries(o) : [[idField, "ASC"] as [string, unknown]];
  return [...rows].sort((a, b) => {
    for (const [field, dir] of keys) {
      const spec = specs[field];
      if (!spec) continue;
      const va = spec.get(a);
      const c =
        compareValue(spec.kind === "date" ? "int" : spec.kind, va, spec.get(b), store) ??
        String(va).localeCompare(String(spec.get(b)));
      if (c !== 0) return str(dir).toUpperCase() === "DESC" ? -c : c;
    }
    return 0;
  });
}

/** 50-row pages; start=-1 skips the count: total 0 and no next (reference §6, huge-data.md). */
function page<R>(rows: R[], startParam: unknown): { rows: R[]; total: number; next?: number } {
  const start = toInt(startParam) ?? 0;
  if (start < 0) return { rows: rows.slice(0, PAGE), total: 0 };
  const slice = rows.slice(start, start + PAGE);
  const out: { rows: R[]; total: number; next?: number } = { rows: slice, total: rows.length };
  if (rows.length > start + PAGE) out.next = start + PAGE;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Contacts
// ---------------------------------------------------------------------------------------------

function legacySpecs(store: PortalStore): Specs<StoredContact> {
  const specs: Specs<StoredContact> = {
    ID: { kind: "int", get: (c) => c.id },
    NAME: { kind: "string", get: (c) => c.name },
    LAST_NAME: { kind: "string", get: (c) => c.lastName },
    SECOND_NAME: { kind: "string", get: (c) => c.secondName },
    OPENED: { kind: "sysbool", get: (c) => c.opened },
    ASSIGNED_BY_ID: { kind: "int", get: (c) => c.assignedById },
    DATE_CREATE: { kind: "date", get: (c) => c.createdTime },
    DATE_MODIFY: { kind: "date", get: (c) => c.updatedTime },
    PHONE: { kind: "multi", get: (c) => c.phones },
    EMAIL: { kind: "multi", get: (c) => c.emails },
  };
  for (const f of store.userFields) {
    specs[f.fieldName] = {
      kind: f.userTypeId === "boolean" ? "ufbool" : f.userTypeId === "enumeration" ? "enum" : "string",
      get: (c) => c.uf[f.fieldName] ?? null,
    };
  }
  return specs;
}

function itemContactSpecs(store: PortalStore): Specs<StoredContact> {
  const specs: Specs<StoredContact> = {
    id: { kind: "int", get: (c) => c.id },
    name: { kind: "string", get: (c) => c.name },
    lastName: { kind: "string", get: (c) => c.lastName },
    secondName: { kind: "string", get: (c) => c.secondName },
    opened: { kind: "sysbool", get: (c) => c.opened },
    assignedById: { kind: "int", get: (c) => c.assignedById },
    createdTime: { kind: "date", get: (c) => c.createdTime },
    updatedTime: { kind: "date", get: (c) => c.updatedTime },
  };
  for (const f of store.userFields) {
    specs[ufRestName(f.fieldName)] = {
      kind: f.userTypeId === "boolean" ? "ufbool" : f.userTypeId === "enumeration" ? "enum" : "string",
      get: (c) => c.uf[f.fieldName] ?? null,
    };
  }
  return specs;
}

/** Applies legacy multifield semantics (reference §5): ID overwrites, ID+DELETE or empty VALUE deletes, no ID appends. */
function applyLegacyMulti(store: PortalStore, list: StoredMulti[], input: unknown): StoredMulti[] {
  const out = list.map((m) => ({ ...m }));
  for (const raw of entries(input)) {
    const e = obj(raw);
    if (!e) continue;
    const id = toInt(e.ID);
    const value = str(e.VALUE).trim();
    if (id !== null) {
      const idx = out.findIndex((m) => m.id === id);
      if (idx < 0) continue; // an ID of another record: ignored (UNCONFIRMED)
      if (str(e.DELETE).toUpperCase() === "Y" || value === "") out.splice(idx, 1);
      else {
        const m = out[idx] as StoredMulti;
        m.value = value;
        if (str(e.VALUE_TYPE) !== "") m.valueType = str(e.VALUE_TYPE);
      }
    } else if (value !== "") {
      out.push(store.newMulti(str(e.VALUE_TYPE) || "WORK", value));
    }
  }
  return out;
}

function legacyContactId(params: Record<string, unknown>): number | null {
  const id = toInt(param(params, "id"));
  return id !== null && id > 0 ? id : null;
}

const LEGACY_TEXT: Record<string, keyof StoredContact> = {
  NAME: "name",
  LAST_NAME: "lastName",
  SECOND_NAME: "secondName",
};

function applyLegacyFields(
  store: PortalStore,
  c: StoredContact,
  fields: Record<string, unknown>,
  importMode: boolean,
): void {
  for (const [k, v] of Object.entries(fields)) {
    const key = k.toUpperCase();
    const textField = LEGACY_TEXT[key];
    if (textField) (c as unknown as Record<string, unknown>)[textField] = str(v);
    else if (key === "OPENED") c.opened = str(v).toUpperCase() !== "N";
    else if (key === "ASSIGNED_BY_ID") c.assignedById = toInt(v) ?? c.assignedById;
    else if (key === "PHONE") c.phones = applyLegacyMulti(store, c.phones, v);
    else if (key === "EMAIL") c.emails = applyLegacyMulti(store, c.emails, v);
    else if (importMode && (key === "DATE_CREATE" || key === "DATE_MODIFY")) {
      const t = parsePortalTime(v, store.utcOffsetMinutes);
      if (t !== null) c[key === "DATE_CREATE" ? "createdTime" : "updatedTime"] = Math.floor(t / 1000) * 1000;
    } else if (key.startsWith("UF_")) {
      const n = store.normaliseUf(key, v);
      if (n !== undefined) c.uf[key] = n;
    }
    // Anything else is silently ignored, as the portal does with unknown names (reference §5).
  }
}

const contactAdd: MethodHandler = (params, store) => {
  const fields = obj(param(params, "fields"));
  if (!fields) return fail(400, "", "Parameter 'fields' must be array.");
  const importMode = str(obj(param(params, "params"))?.IMPORT).toUpperCase() === "Y";
  const c = store.createContact({});
  applyLegacyFields(store, c, fields, importMode);
  if (!importMode || !("DATE_MODIFY" in fields)) c.updatedTime = c.createdTime;
  return { ok: true, result: c.id };
};

const contactUpdate: MethodHandler = (params, store) => {
  const id = legacyContactId(params);
  if (id === null) return fail(400, "", "ID is not defined or invalid.");
  const fields = obj(param(params, "fields"));
  if (!fields) return fail(400, "", "Parameter 'fields' must be array.");
  const c = store.contacts.get(id);
  if (!c) return fail(400, "", "Contact is not found");
  applyLegacyFields(store, c, fields, false);
  store.touch(c);
  return { ok: true, result: true };
};

/**
 * crm.contact.delete {id} → true. A bad id and an unknown Contact are 400 with an empty code, as the
 * legacy methods answer (reference §1, §5; the method page lists "ID is not defined or invalid." and
 * a not-found row). The Contact's multifield entries go with it.
 */
const contactDelete: MethodHandler = (params, store) => {
  const id = legacyContactId(params);
  if (id === null) return fail(400, "", "ID is not defined or invalid.");
  if (!store.contacts.delete(id)) return fail(400, "", "Contact is not found");
  return { ok: true, result: true };
};

const contactGet: MethodHandler = (params, store) => {
  const id = legacyContactId(params);
  if (id === null) return fail(400, "", "ID is not defined or invalid.");
  const c = store.contacts.get(id);
  if (!c) return fail(400, "", "Not found");
  return { ok: true, result: store.legacyContact(c) };
};

function legacySelect(
  row: Record<string, unknown>,
  select: unknown,
  store: PortalStore,
): Record<string, unknown> {
  const names = entries(select).map(str);
  // Default select is `*` plus user fields; PHONE/EMAIL only when named (reference §5).
  const wanted = names.length === 0 ? ["*", "UF_*"] : names;
  const out: Record<string, unknown> = { ID: row.ID };
  const ufNames = new Set(store.userFields.map((f) => f.fieldName));
  for (const [k, v] of Object.entries(row)) {
    const isUf = ufNames.has(k);
    const isMulti = k === "PHONE" || k === "EMAIL";
    if (
      wanted.includes(k) ||
      (wanted.includes("*") && !isUf && !isMulti) ||
      (wanted.includes("UF_*") && isUf)
    ) {
      out[k] = v;
    }
  }
  return out;
}

const contactList: MethodHandler = (params, store) => {
  const specs = legacySpecs(store);
  const test = compileFilter(param(params, "filter"), specs, store, "");
  if (typeof test !== "function") return test;
  const rows = sortRows(
    [...store.contacts.values()].filter(test),
    param(params, "order"),
    specs,
    "ID",
    store,
  );
  const p = page(rows, param(params, "start"));
  const result = p.rows.map((c) => legacySelect(store.legacyContact(c), param(params, "select"), store));
  return { ok: true, result, total: p.total, ...(p.next !== undefined ? { next: p.next } : {}) };
};

const MAX_COMM_VALUES = 20;

const duplicateFindByComm: MethodHandler = (params, store) => {
  const type = str(param(params, "type")).toUpperCase();
  if (type !== "PHONE" && type !== "EMAIL") return fail(400, "", "Communication type is not defined.");
  const values = entries(param(params, "values"))
    .map(str)
    .filter((v) => v !== "");
  if (values.length === 0) return fail(400, "", "Communication values are not defined.");
  // The docs give the limit (20) but not the error text; this message is the emulator's own.
  if (values.length > MAX_COMM_VALUES) return fail(400, "", "Too many communication values.");
  const entityType = str(param(params, "entity_type")).toUpperCase();
  if (entityType !== "" && entityType !== "CONTACT" && entityType !== "LEAD" && entityType !== "COMPANY") {
    return fail(400, "", "Entity type is not supported.");
  }
  if (entityType === "LEAD" || entityType === "COMPANY") return { ok: true, result: [] };
  const keys = new Set(values.map((v) => (type === "PHONE" ? phoneKey(v) : v.trim().toLowerCase())));
  const hits = [...store.contacts.values()]
    .filter((c) =>
      (type === "PHONE" ? c.phones : c.emails).some((m) =>
        keys.has(type === "PHONE" ? phoneKey(m.value) : m.value.trim().toLowerCase()),
      ),
    )
    .map((c) => c.id)
    .sort((a, b) => a - b)
    .slice(0, MAX_COMM_VALUES);
  // Nothing found is an empty array, not an object (reference §4).
  return { ok: true, result: hits.length === 0 ? [] : { CONTACT: hits } };
};

const contactUserfieldList: MethodHandler = (params, store) => {
  const filter = obj(param(params, "filter")) ?? {};
  const rows = store.userFields.map((f) => {
    const row: Record<string, unknown> = {
      ID: String(f.id),
      ENTITY_ID: "CRM_CONTACT",
      FIELD_NAME: f.fieldName,
      USER_TYPE_ID: f.userTypeId,
      XML_ID: null,
      SORT: "100",
      MULTIPLE: "N",
      MANDATORY: "N",
      SHOW_FILTER: "E",
      SHOW_IN_LIST: "Y",
      EDIT_IN_LIST: "Y",
      IS_SEARCHABLE: "N",
      SETTINGS: f.userTypeId === "boolean" ? { DEFAULT_VALUE: 0, DISPLAY: "CHECKBOX" } : {},
    };
    if (f.list) row.LIST = f.list.map((e) => ({ ...e }));
    return row;
  });
  const out = rows.filter((r) =>
    Object.entries(filter).every(
      ([k, v]) => k.toUpperCase() === "LANG" || str(r[k.toUpperCase()]) === str(v),
    ),
  );
  return { ok: true, result: out, total: out.length };
};

// ---------------------------------------------------------------------------------------------
// Universal crm.item.* (Contacts and smart processes)
// ---------------------------------------------------------------------------------------------

function itemSpecs(): Specs<StoredItem> {
  return {
    id: { kind: "int", get: (i) => i.id },
    title: { kind: "string", get: (i) => i.title },
    stageId: { kind: "string", get: (i) => i.stageId },
    categoryId: { kind: "int", get: (i) => i.categoryId },
    assignedById: { kind: "int", get: (i) => i.assignedById },
    opened: { kind: "sysbool", get: (i) => i.opened },
    contactId: { kind: "int", get: (i) => i.contactId },
    createdTime: { kind: "date", get: (i) => i.createdTime },
    updatedTime: { kind: "date", get: (i) => i.updatedTime },
  };
}

function pick(row: Record<string, unknown>, select: unknown): Record<string, unknown> {
  const names = entries(select).map(str);
  if (names.length === 0 || names.includes("*")) return row;
  // Multifields (fm) cannot be named in select (reference §6).
  const out: Record<string, unknown> = { id: row.id };
  for (const n of names) if (n in row && n !== "fm") out[n] = row[n];
  return out;
}

type EntityRef =
  | { kind: "contact" }
  | { kind: "spa"; def: NonNullable<ReturnType<PortalStore["smartProcess"]>> };

function entity(params: Record<string, unknown>, store: PortalStore): EntityRef | MethodReply {
  const t = toInt(params.entityTypeId);
  if (t === CONTACT_TYPE_ID) return { kind: "contact" };
  const def = t === null ? undefined : store.smartProcess(t);
  if (!def) return fail(400, "NOT_FOUND", "Smart process not found");
  return { kind: "spa", def };
}

function isReply(v: unknown): v is MethodReply {
  return obj(v) !== null && "ok" in (v as object);
}

/** fm on crm.item.update: an array appends; an object keyed n0.. adds, by id updates/deletes (reference §6). */
function applyFm(store: PortalStore, c: StoredContact, fm: unknown): void {
  const apply = (key: string | null, raw: unknown) => {
    const e = obj(raw);
    if (!e) return;
    const typeId = str(e.typeId).toUpperCase();
    if (typeId !== "PHONE" && typeId !== "EMAIL") return; // typeId required, else silently nothing
    const list = typeId === "PHONE" ? c.phones : c.emails;
    const value = str(e.value).trim();
    const id = key !== null && /^\d+$/.test(key) ? Number(key) : null;
    const existing = id === null ? undefined : list.find((m) => m.id === id);
    if (existing) {
      if (value === "") list.splice(list.indexOf(existing), 1);
      else {
        existing.value = value;
        if (str(e.valueType) !== "") existing.valueType = str(e.valueType);
      }
    } else if (value !== "") {
      list.push(store.newMulti(str(e.valueType) || "WORK", value));
    }
  };
  if (Array.isArray(fm)) for (const e of fm) apply(null, e);
  else for (const [k, v] of Object.entries(obj(fm) ?? {})) apply(k, v);
}

function applyItemContactFields(store: PortalStore, c: StoredContact, fields: Record<string, unknown>): void {
  const byRest = new Map(store.userFields.map((f) => [ufRestName(f.fieldName), f.fieldName]));
  for (const [k, v] of Object.entries(fields)) {
    if (k === "name") c.name = str(v);
    else if (k === "lastName") c.lastName = str(v);
    else if (k === "secondName") c.secondName = str(v);
    else if (k === "opened") c.opened = str(v).toUpperCase() !== "N";
    else if (k === "assignedById") c.assignedById = toInt(v) ?? c.assignedById;
    else if (k === "fm") applyFm(store, c, v);
    else {
      const physical = byRest.get(k) ?? (k.startsWith("UF_") ? k : undefined);
      if (physical) {
        const n = store.normaliseUf(physical, v);
        if (n !== undefined) c.uf[physical] = n;
      }
    }
  }
}

const SPA_UF = /^ufCrm\d+_\d+$/;

function applySpaFields(
  def: EntityRef & { kind: "spa" },
  i: StoredItem,
  fields: Record<string, unknown>,
): MethodReply | null {
  for (const [k, v] of Object.entries(fields)) {
    if (k === "title") i.title = str(v);
    else if (k === "stageId") {
      if (!def.def.stages.includes(str(v))) return fail(400, "INVALID_ARG_VALUE", "Unknown stage");
      i.stageId = str(v);
    } else if (k === "categoryId") i.categoryId = toInt(v) ?? i.categoryId;
    else if (k === "assignedById") i.assignedById = toInt(v) ?? i.assignedById;
    else if (k === "opened") i.opened = str(v).toUpperCase() !== "N";
    else if (k === "contactId") i.contactId = toInt(v);
    else if (SPA_UF.test(k) && k.startsWith(`ufCrm${def.def.typeId}_`)) {
      i.uf[k] = Array.isArray(v) ? v.map(str).join(",") : v === null ? null : (v as string | number);
    }
  }
  return null;
}

const itemAdd: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const fields = obj(params.fields) ?? {};
  if (e.kind === "contact") {
    const c = store.createContact({});
    applyItemContactFields(store, c, fields);
    return { ok: true, result: { item: store.itemContact(c) } };
  }
  const probe = store.createItem(e.def, {});
  const err = applySpaFields(e, probe, fields);
  if (err) {
    store.items.delete(probe.id);
    return err;
  }
  return { ok: true, result: { item: store.itemView(probe) } };
};

function findItem(e: EntityRef, id: number | null, store: PortalStore): StoredContact | StoredItem | null {
  if (id === null) return null;
  if (e.kind === "contact") return store.contacts.get(id) ?? null;
  const i = store.items.get(id);
  return i && i.entityTypeId === e.def.entityTypeId ? i : null;
}

const itemUpdate: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const found = findItem(e, toInt(params.id), store);
  if (!found) return fail(400, "NOT_FOUND", "Element not found");
  const fields = obj(params.fields) ?? {};
  if (e.kind === "contact") {
    const c = found as StoredContact;
    applyItemContactFields(store, c, fields);
    store.touch(c);
    return { ok: true, result: { item: store.itemContact(c) } };
  }
  const i = found as StoredItem;
  const copy: StoredItem = { ...i, uf: { ...i.uf } };
  const err = applySpaFields(e, copy, fields);
  if (err) return err;
  Object.assign(i, copy);
  store.touch(i);
  return { ok: true, result: { item: store.itemView(i) } };
};

/** crm.item.delete {entityTypeId, id}: `[]` (PHP's empty array); missing: 400 NOT_FOUND. */
const itemDelete: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const id = toInt(params.id);
  const found = findItem(e, id, store);
  if (!found || id === null) return fail(400, "NOT_FOUND", "Item not found");
  if (e.kind === "contact") store.contacts.delete(id);
  else store.items.delete(id);
  return { ok: true, result: [] };
};

const itemGet: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const found = findItem(e, toInt(params.id), store);
  if (!found) return fail(400, "NOT_FOUND", "Element not found");
  const item =
    e.kind === "contact"
      ? store.itemContact(found as StoredContact, str(params.useOriginalUfNames).toUpperCase() === "Y")
      : store.itemView(found as StoredItem);
  return { ok: true, result: { item } };
};

const itemList: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const original = str(params.useOriginalUfNames).toUpperCase() === "Y";
  let rows: Array<Record<string, unknown>>;
  let total: number;
  let next: number | undefined;
  if (e.kind === "contact") {
    const specs = itemContactSpecs(store);
    const test = compileFilter(params.filter, specs, store, "INVALID_ARG_VALUE");
    if (typeof test !== "function") return test;
    const sorted = sortRows([...store.contacts.values()].filter(test), params.order, specs, "id", store);
    const p = page(sorted, params.start);
    rows = p.rows.map((c) => pick(store.itemContact(c, original), params.select));
    total = p.total;
    next = p.next;
  } else {
    const specs = itemSpecs();
    const def = e.def;
    for (const k of Object.keys(obj(params.filter) ?? {})) {
      const f = splitKey(k).field;
      if (SPA_UF.test(f)) specs[f] = { kind: "string", get: (i) => i.uf[f] ?? null };
    }
    const test = compileFilter(params.filter, specs, store, "INVALID_ARG_VALUE");
    if (typeof test !== "function") return test;
    const all = [...store.items.values()].filter((i) => i.entityTypeId === def.entityTypeId && test(i));
    const p = page(sortRows(all, params.order, specs, "id", store), params.start);
    rows = p.rows.map((i) => pick(store.itemView(i), params.select));
    total = p.total;
    next = p.next;
  }
  return { ok: true, result: { items: rows }, total, ...(next !== undefined ? { next } : {}) };
};

// ---------------------------------------------------------------------------------------------
// Metadata: crm.item.fields, crm.category.list, crm.status.list (what preflight reads)
// ---------------------------------------------------------------------------------------------

/** One field description of crm.item.fields (api-reference/crm/universal/crm-item-fields.md). */
function fieldInfo(type: string, upperName: string, extra: Record<string, unknown> = {}) {
  return {
    type,
    isRequired: false,
    isReadOnly: false,
    isImmutable: false,
    isMultiple: false,
    isDynamic: upperName.startsWith("UF_"),
    title: upperName,
    upperName,
    ...extra,
  };
}

const SYSTEM_ITEM_FIELDS: Array<[string, string, string]> = [
  ["id", "integer", "ID"],
  ["createdTime", "datetime", "CREATED_TIME"],
  ["updatedTime", "datetime", "UPDATED_TIME"],
  ["assignedById", "user", "ASSIGNED_BY_ID"],
  ["opened", "boolean", "OPENED"],
];

/** The UF's type as crm.item.fields names it: a list is `enumeration` with `items` [{ID, VALUE}]. */
const itemFields: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const fields: Record<string, unknown> = {};
  for (const [name, type, upper] of SYSTEM_ITEM_FIELDS) fields[name] = fieldInfo(type, upper);
  if (e.kind === "contact") {
    fields.name = fieldInfo("string", "NAME");
    fields.lastName = fieldInfo("string", "LAST_NAME");
    fields.fm = fieldInfo("crm_multifield", "FM", { isMultiple: true });
    for (const f of store.userFields) {
      fields[ufRestName(f.fieldName)] = fieldInfo(
        f.userTypeId,
        f.fieldName,
        f.list ? { items: f.list.map((i) => ({ ID: i.ID, VALUE: i.VALUE })) } : {},
      );
    }
  } else {
    fields.title = fieldInfo("string", "TITLE");
    fields.stageId = fieldInfo("crm_status", "STAGE_ID");
    fields.categoryId = fieldInfo("crm_category", "CATEGORY_ID");
    fields.contactId = fieldInfo("crm_contact", "CONTACT_ID");
    for (const f of e.def.fields ?? []) {
      const m = /^ufCrm(\d+)_(\d+)$/.exec(f);
      fields[f] = fieldInfo("string", m ? `UF_CRM_${m[1]}_${m[2]}` : f.toUpperCase());
    }
  }
  return { ok: true, result: { fields } };
};

/** crm.category.list {entityTypeId}: a smart process's funnels; Contacts have the default one (0). */
const categoryList: MethodHandler = (params, store) => {
  const e = entity(params, store);
  if (isReply(e)) return e;
  const cat = (id: number, entityTypeId: number) => ({
    id,
    name: id === 0 ? "General" : `Funnel ${id}`,
    sort: 500,
    entityTypeId,
    isDefault: "Y",
  });
  const categories =
    e.kind === "contact" ? [cat(0, CONTACT_TYPE_ID)] : [cat(e.def.categoryId, e.def.entityTypeId)];
  return { ok: true, result: { categories }, total: categories.length };
};

/**
 * crm.status.list: reference lists; a smart process's stages are ENTITY_ID
 * DYNAMIC_<entityTypeId>_STAGE_<categoryId>, each with STATUS_ID as the item's stageId.
 */
const statusList: MethodHandler = (params, store) => {
  const filter = obj(param(params, "filter")) ?? {};
  const wanted = filter.ENTITY_ID === undefined ? null : str(filter.ENTITY_ID);
  const rows: Array<Record<string, unknown>> = [];
  let n = 1;
  for (const p of store.smartProcesses) {
    const entityId = `DYNAMIC_${p.entityTypeId}_STAGE_${p.categoryId}`;
    p.stages.forEach((stage, i) => {
      const id = n++;
      if (wanted !== null && wanted !== entityId) return;
      const last = i >= p.stages.length - 2;
      rows.push({
        ID: String(id),
        ENTITY_ID: entityId,
        STATUS_ID: stage,
        NAME: stage.slice(stage.indexOf(":") + 1),
        NAME_INIT: "",
        SORT: String((i + 1) * 10),
        SYSTEM: i === 0 || last ? "Y" : "N",
        CATEGORY_ID: String(p.categoryId),
        SEMANTICS: !last ? null : i === p.stages.length - 2 ? "S" : "F",
      });
    });
  }
  return { ok: true, result: rows, total: rows.length };
};

// ---------------------------------------------------------------------------------------------
// System methods: scope, methods, method.get (api-reference/common/system/)
// ---------------------------------------------------------------------------------------------

/** Scope of a REST method: `basic` ones every webhook may call, the rest by their module. */
export function methodScope(method: string): string {
  if (BASIC_METHODS.has(method)) return "basic";
  return method.slice(0, method.indexOf(".") > 0 ? method.indexOf(".") : method.length);
}

/** A boolean parameter as JSON, a form or a query string sends it. */
function isTrue(v: unknown): boolean {
  return v === true || v === 1 || ["true", "1", "Y"].includes(str(v));
}

const BASIC_METHODS = new Set(["batch", "scope", "methods", "method.get"]);
/** Every scope a portal knows, for `scope` with full=true (a subset of the documented list). */
const ALL_SCOPES = ["bizproc", "calendar", "crm", "department", "disk", "im", "task", "user"];

function granted(store: PortalStore, method: string): boolean {
  const s = methodScope(method);
  return s === "basic" || store.scopes.includes(s);
}

/** `scope`: the webhook's scopes; full=true lists every scope of the portal. */
const scopeMethod: MethodHandler = (params, store) => {
  const full = isTrue(param(params, "full"));
  return { ok: true, result: full ? [...ALL_SCOPES] : [...store.scopes] };
};

/** `methods` (deprecated for method.get): methods the webhook may call, of one scope, or all. */
const methodsMethod: MethodHandler = (params, store) => {
  const names = [...BASIC_METHODS, ...Object.keys(METHODS).filter((m) => !BASIC_METHODS.has(m))];
  const full = isTrue(param(params, "full"));
  const scope = param(params, "scope");
  const out =
    scope !== undefined
      ? names.filter((m) => methodScope(m) === (str(scope) === "" ? "basic" : str(scope)))
      : full
        ? names
        : names.filter((m) => granted(store, m));
  return { ok: true, result: [...new Set(out)] };
};

/** `method.get {name}`: isExisting (the portal has it) and isAvailable (the webhook's scopes allow it). */
const methodGet: MethodHandler = (params, store) => {
  const name = str(param(params, "name"));
  const isExisting = name === "batch" || name in METHODS;
  return { ok: true, result: { isExisting, isAvailable: isExisting && granted(store, name) } };
};

/** A call of a method outside the webhook's scopes (reference §1: 401 per b24pysdk, 403 per EN docs). */
export function scopeRefusal(store: PortalStore, method: string): MethodReply | null {
  if (!(method in METHODS) || granted(store, method)) return null;
  return fail(
    401,
    "insufficient_scope",
    "The request requires higher privileges than provided by the webhook token",
  );
}

// ---------------------------------------------------------------------------------------------
// Business processes: bizproc.workflow.template.list (api-reference/bizproc/template)
// ---------------------------------------------------------------------------------------------

const TEMPLATE_FIELDS = ["ID", "MODULE_ID", "ENTITY", "DOCUMENT_TYPE", "AUTO_EXECUTE", "NAME", "TEMPLATE"];

/**
 * The templates of the workflow designer: administrators only (400 ACCESS_DENIED otherwise). SELECT
 * (default ID), FILTER by any field named in any case (DOCUMENT_TYPE also as the three-element
 * document type), ORDER, start; 50 a page with `total`.
 */
const workflowTemplateList: MethodHandler = (params, store) => {
  if (!store.bizprocAdmin) return fail(400, "ACCESS_DENIED", "Access denied!");
  const rows = store.workflowTemplates.map((t) => ({
    ID: String(t.ID),
    MODULE_ID: t.DOCUMENT_TYPE[0],
    ENTITY: t.DOCUMENT_TYPE[1],
    DOCUMENT_TYPE: [...t.DOCUMENT_TYPE],
    AUTO_EXECUTE: String(t.AUTO_EXECUTE),
    NAME: t.NAME,
    TEMPLATE: structuredClone(t.TEMPLATE),
  }));
  const filter = obj(param(params, "filter")) ?? {};
  const matches = (row: (typeof rows)[number]) =>
    Object.entries(filter).every(([rawKey, wanted]) => {
      const { op, field } = splitKey(rawKey);
      const key = field.toUpperCase();
      if (!TEMPLATE_FIELDS.includes(key)) return false;
      let hit: boolean;
      if (key === "DOCUMENT_TYPE" && (Array.isArray(wanted) || obj(wanted))) {
        const want = entries(wanted).map(str);
        hit = want.length === 3 && want.every((v, i) => v === row.DOCUMENT_TYPE[i]);
      } else if (key === "DOCUMENT_TYPE") {
        hit = row.DOCUMENT_TYPE[2] === str(wanted);
      } else {
        hit = str(row[key as keyof typeof row]) === str(wanted);
      }
      return op === "!" || op === "!=" ? !hit : hit;
    });
  const selected = entries(param(params, "select")).map((f) => str(f).toUpperCase());
  const select = selected.length > 0 ? selected : ["ID"];
  const all = rows.filter(matches).sort((a, b) => Number(a.ID) - Number(b.ID));
  const p = page(all, param(params, "start"));
  const result = p.rows.map((r) =>
    Object.fromEntries(select.filter((f) => f in r).map((f) => [f, r[f as keyof typeof r]])),
  );
  return { ok: true, result, total: p.total, ...(p.next !== undefined ? { next: p.next } : {}) };
};

/** Every method the emulator serves, by REST name. */
export const METHODS: Record<string, MethodHandler> = {
  scope: scopeMethod,
  methods: methodsMethod,
  "method.get": methodGet,
  "crm.category.list": categoryList,
  "crm.item.fields": itemFields,
  "crm.status.list": statusList,
  "bizproc.workflow.template.list": workflowTemplateList,
  "crm.contact.add": contactAdd,
  "crm.contact.delete": contactDelete,
  "crm.contact.get": contactGet,
  "crm.contact.list": contactList,
  "crm.contact.update": contactUpdate,
  "crm.contact.userfield.list": contactUserfieldList,
  "crm.duplicate.findbycomm": duplicateFindByComm,
  "crm.item.add": itemAdd,
  "crm.item.delete": itemDelete,
  "crm.item.get": itemGet,
  "crm.item.list": itemList,
  "crm.item.update": itemUpdate,
};

/** Re-exported for the server's `time` block. */
export { formatPortalTime };
