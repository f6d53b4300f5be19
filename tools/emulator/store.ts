// The emulated portal's data: Contacts (legacy UPPER_CASE and universal camelCase views of the same
// record), smart-process items with stages, and the Contact user fields including one enumeration.
// Shapes and quirks follow ../shared/reference/bitrix24-rest.md; where the reference marks something
// UNCONFIRMED the choice made here is commented.
import { ALERT_FIELD_NAMES } from "../../src/settings-schema.js";

/** One multifield entry (PHONE or EMAIL) with the portal's own entry ID. */
export interface StoredMulti {
  id: number;
  valueType: string;
  value: string;
}

/** A Contact as stored. Times are epoch ms rounded down to the second, like the portal's. */
export interface StoredContact {
  id: number;
  name: string;
  lastName: string;
  secondName: string;
  opened: boolean;
  assignedById: number;
  createdTime: number;
  updatedTime: number;
  phones: StoredMulti[];
  emails: StoredMulti[];
  /** User fields by physical name (UF_CRM_...): string, 0/1 for booleans, enum element ID string. */
  uf: Record<string, string | number | null>;
}

/** A smart-process item as stored. `uf` is keyed by the camelCase name (ufCrm<typeId>_...). */
export interface StoredItem {
  id: number;
  entityTypeId: number;
  title: string;
  stageId: string;
  categoryId: number;
  assignedById: number;
  opened: boolean;
  contactId: number | null;
  createdTime: number;
  updatedTime: number;
  uf: Record<string, string | number | null>;
}

export interface EnumElement {
  ID: string;
  VALUE: string;
  SORT: string;
  DEF: "Y" | "N";
  XML_ID: string;
}

/** A Contact user field definition, as crm.contact.userfield.list describes it. */
export interface UserFieldDef {
  id: number;
  fieldName: string;
  userTypeId: "string" | "boolean" | "enumeration" | "double";
  list?: EnumElement[];
}

/** A smart process the emulator hosts (the business-alert process, §11). */
export interface SmartProcessDef {
  entityTypeId: number;
  /** The SPA's own type id: user fields are named ufCrm<typeId>_<n>. */
  typeId: number;
  categoryId: number;
  stages: string[];
  /**
   * The SPA's user fields (camelCase, ufCrm<typeId>_<n>) as crm.item.fields describes them. Writes
   * to other ufCrm<typeId>_ names are still kept, so older tests need not list theirs.
   */
  fields?: string[];
}

/** What a Contact user field may be made into, or null for "the field does not exist". */
export type UserFieldType = UserFieldDef["userTypeId"] | null;

export interface StoreOptions {
  /** Physical names of the integration's three Contact user fields. */
  fields: { userId: string; registered: string; citizenship: string };
  smartProcesses?: SmartProcessDef[];
  /** Portal time zone offset, minutes east of UTC. Default 180 (Moscow). */
  utcOffsetMinutes?: number;
  now?: () => number;
  /**
   * IDs the first new Contact and smart-process item get (default 1). The sandbox portal lives in
   * memory while the database persists: after a restart it starts above the IDs the database already
   * refers to, so a new Contact never takes the ID of one an old mapping holds.
   */
  firstIds?: { contact?: number; item?: number };
  /**
   * A portal set up wrongly: the type each integration field really has (null: it does not exist).
   * Default string, boolean and enumeration.
   */
  userFieldTypes?: Partial<Record<"userId" | "registered" | "citizenship", UserFieldType>>;
  /** The citizenship list's elements (default DEFAULT_CITIZENSHIP); [] is a list without items. */
  citizenship?: EnumElement[];
  /** The scopes the webhook was given (`scope`, `method.get`); default ["crm"]. */
  scopes?: string[];
  /** The forms this portal honours where the reference leaves them open (default: as documented). */
  contract?: PortalContract;
  /** Business process templates (bizproc.workflow.template.list); default none. */
  workflowTemplates?: WorkflowTemplate[];
  /**
   * Whether the webhook's user is a portal administrator: bizproc.workflow.template.list answers only
   * an administrator (400 ACCESS_DENIED otherwise). Default true.
   */
  bizprocAdmin?: boolean;
}

/**
 * How a portal treats the forms the reference leaves open (reference §6, §9, UNCONFIRMED there). The
 * defaults are what the reference documents; each other value is a portal as public reports
 * describe one, so preflight's write probe can be tested against it.
 */
export interface PortalContract {
  /**
   * The value a list filter on a boolean user field matches: `1/0` (reference §6: the documented
   * form; default) or `Y/N`. A value of the other form matches nothing.
   */
  booleanFilter?: "1/0" | "Y/N";
  /**
   * The values crm.contact.add/update (and crm.item.*) take for a boolean user field: `any` (1/0,
   * Y/N and true/false; default), `1/0` only or `Y/N` only. A value of the other form is stored as
   * false, as a portal that tests for its own form does.
   */
  booleanWrite?: "any" | "1/0" | "Y/N";
  /**
   * Date filters whose value carries an offset (`Z`, `+03:00`): `honoured` (reference §6; default)
   * or `ignored`, i.e. dropped as if absent, so the list returns everything else it matches.
   */
  dateFilterWithOffset?: "honoured" | "ignored";
}

/** One business process template as bizproc.workflow.template.list returns it. */
export interface WorkflowTemplate {
  ID: number;
  NAME: string;
  /** [module, document class, document type], e.g. ["crm", "CCrmDocumentContact", "CONTACT"]. */
  DOCUMENT_TYPE: [string, string, string];
  /** 0 none, 1 on create, 2 on change, 3 both (api-reference/bizproc/template). */
  AUTO_EXECUTE: number;
  /** The activity tree: objects with Type, Name, Properties and Children. */
  TEMPLATE: unknown[];
}

/** A Contact workflow that starts on create and on change and posts to `handler` (a webhook URL). */
export function contactWorkflowTemplate(handler: string, autoExecute = 3, id = 11): WorkflowTemplate {
  return {
    ID: id,
    NAME: "Notify bitrix-sync",
    DOCUMENT_TYPE: ["crm", "CCrmDocumentContact", "CONTACT"],
    AUTO_EXECUTE: autoExecute,
    TEMPLATE: [
      {
        Type: "SequentialWorkflowActivity",
        Name: "Template",
        Properties: { Title: "Sequential business process" },
        Children: [
          {
            Type: "WebHookActivity",
            Name: "A1",
            Properties: { Title: "Webhook", Handler: handler },
            Children: [],
          },
        ],
      },
    ],
  };
}

/** The citizenship list the sandbox portal starts with. */
export const DEFAULT_CITIZENSHIP: EnumElement[] = [
  { ID: "45", VALUE: "Россия", SORT: "10", DEF: "N", XML_ID: "RU" },
  { ID: "46", VALUE: "Казахстан", SORT: "20", DEF: "N", XML_ID: "KZ" },
  { ID: "47", VALUE: "Узбекистан", SORT: "30", DEF: "N", XML_ID: "UZ" },
  { ID: "48", VALUE: "Таджикистан", SORT: "40", DEF: "N", XML_ID: "TJ" },
  { ID: "49", VALUE: "Кыргызстан", SORT: "50", DEF: "N", XML_ID: "KG" },
];

/** The smart process the sandbox portal starts with. */
export const DEFAULT_SMART_PROCESS: SmartProcessDef = {
  entityTypeId: 1040,
  typeId: 14,
  categoryId: 7,
  stages: ["DT1040_7:NEW", "DT1040_7:PREPARATION", "DT1040_7:SUCCESS", "DT1040_7:FAIL"],
  // One user field per logical alert field (ALERT_FIELD_NAMES has 14).
  fields: Array.from({ length: 14 }, (_, i) => `ufCrm14_${1001 + i}`),
};

/** The logical alert fields the tests and the chaos run name first (their field numbers are fixed). */
const FIRST_ALERT_FIELDS = ["alert_number", "fingerprint", "occurrence_count", "type"];

/**
 * The alerts.* settings that point the service at DEFAULT_SMART_PROCESS: its entity type, category,
 * new and terminal stages, and one of its user fields per logical alert field (alert_number is
 * ufCrm14_1001, fingerprint 1002, occurrence_count 1003, type 1004, the others after them in
 * alphabetical order). Complete, as the catalogue requires while alerts go to the smart process.
 */
export const DEFAULT_ALERT_SETTINGS = {
  "alerts.entity_type_id": DEFAULT_SMART_PROCESS.entityTypeId,
  "alerts.category_id": DEFAULT_SMART_PROCESS.categoryId,
  "alerts.stage_new": DEFAULT_SMART_PROCESS.stages[0] as string,
  "alerts.stage_resolved": DEFAULT_SMART_PROCESS.stages[2] as string,
  "alerts.stage_closed_without_resolution": DEFAULT_SMART_PROCESS.stages[3] as string,
  "alerts.fields": Object.fromEntries(
    [...FIRST_ALERT_FIELDS, ...ALERT_FIELD_NAMES.filter((n) => !FIRST_ALERT_FIELDS.includes(n))].map(
      (name, i) => [name, (DEFAULT_SMART_PROCESS.fields as string[])[i] as string],
    ),
  ) as Record<(typeof ALERT_FIELD_NAMES)[number], string>,
};

/** Formats epoch ms as the portal does: ISO 8601, seconds, numeric offset. */
export function formatPortalTime(ms: number, offsetMinutes: number): string {
  const local = new Date(Math.floor(ms / 1000) * 1000 + offsetMinutes * 60_000);
  const sign = offsetMinutes >= 0 ? "+" : "-";
  const abs = Math.abs(offsetMinutes);
  const off = `${sign}${String(Math.floor(abs / 60)).padStart(2, "0")}:${String(abs % 60).padStart(2, "0")}`;
  return `${local.toISOString().slice(0, 19)}${off}`;
}

/**
 * Parses a filter/date value. A value without an offset is read in the portal's time zone
 * (UNCONFIRMED in the reference; this is the behaviour of the portal's own date filters).
 */
export function parsePortalTime(v: unknown, offsetMinutes: number): number | null {
  if (typeof v !== "string") return null;
  const m = /^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?))?(Z|[+-]\d{2}:?\d{2})?$/.exec(
    v.trim(),
  );
  if (!m) return null;
  const time = m[2] ?? "00:00:00";
  if (m[3]) {
    const t = Date.parse(
      `${m[1]}T${time}${m[3] === "Z" ? "Z" : m[3].replace(/^([+-]\d{2})(\d{2})$/, "$1:$2")}`,
    );
    return Number.isNaN(t) ? null : t;
  }
  const t = Date.parse(`${m[1]}T${time}Z`);
  return Number.isNaN(t) ? null : t - offsetMinutes * 60_000;
}

/** Digits only, with an extension (after ext/доб/#/,/;) cut off: phone duplicate matching. */
export function phoneKey(v: string): string {
  const main = v.split(/(?:ext\.?|доб\.?|#|,|;|x)/i)[0] ?? v;
  return main.replace(/\D/g, "");
}

function secondOf(ms: number): number {
  return Math.floor(ms / 1000) * 1000;
}

/** The emulated portal's records. All mutations bump updatedTime as the portal does. */
export class PortalStore {
  readonly contacts = new Map<number, StoredContact>();
  readonly items = new Map<number, StoredItem>();
  readonly userFields: UserFieldDef[];
  readonly smartProcesses: SmartProcessDef[];
  /** Scopes of the webhook: a method of another scope answers insufficient_scope. */
  readonly scopes: string[];
  /** The forms this portal honours (PortalContract), every one filled in. */
  readonly contract: Required<PortalContract>;
  readonly workflowTemplates: WorkflowTemplate[];
  readonly bizprocAdmin: boolean;
  readonly fields: StoreOptions["fields"];
  readonly utcOffsetMinutes: number;
  private nextContactId = 1;
  private nextItemId = 1;
  private nextMultiId = 1;
  private readonly now: () => number;

  constructor(opts: StoreOptions) {
    this.fields = opts.fields;
    this.utcOffsetMinutes = opts.utcOffsetMinutes ?? 180;
    this.now = opts.now ?? Date.now;
    this.nextContactId = opts.firstIds?.contact ?? 1;
    this.nextItemId = opts.firstIds?.item ?? 1;
    this.smartProcesses = opts.smartProcesses ?? [DEFAULT_SMART_PROCESS];
    this.scopes = opts.scopes ?? ["crm"];
    this.contract = {
      booleanFilter: opts.contract?.booleanFilter ?? "1/0",
      booleanWrite: opts.contract?.booleanWrite ?? "any",
      dateFilterWithOffset: opts.contract?.dateFilterWithOffset ?? "honoured",
    };
    this.workflowTemplates = (opts.workflowTemplates ?? []).map((t) => structuredClone(t));
    this.bizprocAdmin = opts.bizprocAdmin ?? true;
    const types = opts.userFieldTypes ?? {};
    const defs: Array<[number, string, UserFieldType]> = [
      [201, opts.fields.userId, types.userId === undefined ? "string" : types.userId],
      [202, opts.fields.registered, types.registered === undefined ? "boolean" : types.registered],
      [203, opts.fields.citizenship, types.citizenship === undefined ? "enumeration" : types.citizenship],
    ];
    this.userFields = [];
    for (const [id, fieldName, userTypeId] of defs) {
      if (userTypeId === null) continue;
      const def: UserFieldDef = { id, fieldName, userTypeId };
      if (userTypeId === "enumeration")
        def.list = (opts.citizenship ?? DEFAULT_CITIZENSHIP).map((e) => ({ ...e }));
      this.userFields.push(def);
    }
  }

  /** Current time rounded to the second, as stored by the portal. */
  clock(): number {
    return secondOf(this.now());
  }

  userField(name: string): UserFieldDef | undefined {
    return this.userFields.find((f) => f.fieldName === name);
  }

  smartProcess(entityTypeId: number): SmartProcessDef | undefined {
    return this.smartProcesses.find((p) => p.entityTypeId === entityTypeId);
  }

  /** Adds an enumeration element to a list field (a portal admin editing the list). */
  addEnumElement(fieldName: string, value: string, xmlId = ""): EnumElement {
    const f = this.userField(fieldName);
    if (!f?.list) throw new Error("not an enumeration field");
    const id = String(Math.max(0, ...f.list.map((e) => Number(e.ID))) + 1);
    const el: EnumElement = {
      ID: id,
      VALUE: value,
      SORT: String(f.list.length * 10 + 10),
      DEF: "N",
      XML_ID: xmlId,
    };
    f.list.push(el);
    return el;
  }

  /**
   * Normalises a user field value the way the portal stores it; unknown fields return undefined.
   * `written`: the value came through a REST write, so a boolean obeys the forms the portal takes;
   * false for a record a test seeds as already on the portal.
   */
  normaliseUf(name: string, v: unknown, written = true): string | number | null | undefined {
    const def = this.userField(name);
    if (!def) return undefined;
    if (v === null || v === undefined || v === "" || (v === false && def.userTypeId !== "boolean"))
      return null;
    switch (def.userTypeId) {
      case "boolean": {
        // What sets the flag depends on the forms the portal takes (PortalContract.booleanWrite);
        // anything else is stored as false.
        const numeric = v === true || v === 1 || v === "1";
        const letter = v === "Y" || v === "y";
        const form = written ? this.contract.booleanWrite : "any";
        return (numeric && form !== "Y/N") || (letter && form !== "1/0") ? 1 : 0;
      }
      case "double": {
        const n = Number(v);
        return Number.isFinite(n) ? n : null;
      }
      case "enumeration":
        // The portal stores the element ID; an ID it does not know is kept here so tests can model
        // a list element deleted after it was used (the §3.3 "unknown enum ID" case).
        return typeof v === "number" || typeof v === "string" ? String(v) : null;
      default:
        return typeof v === "number" || typeof v === "string" ? String(v) : null;
    }
  }

  newMulti(valueType: string, value: string): StoredMulti {
    return { id: this.nextMultiId++, valueType, value };
  }

  /** Creates a Contact. `created`/`updated` may be given (tests; crm.contact.add with IMPORT=Y). */
  createContact(
    c: Partial<Omit<StoredContact, "id" | "phones" | "emails">> & {
      phones?: Array<{ valueType?: string; value: string }>;
      emails?: Array<{ valueType?: string; value: string }>;
    },
  ): StoredContact {
    const t = this.clock();
    const contact: StoredContact = {
      id: this.nextContactId++,
      name: c.name ?? "",
      lastName: c.lastName ?? "",
      secondName: c.secondName ?? "",
      opened: c.opened ?? true,
      assignedById: c.assignedById ?? 1,
      createdTime: secondOf(c.createdTime ?? t),
      updatedTime: secondOf(c.updatedTime ?? c.createdTime ?? t),
      phones: (c.phones ?? []).map((p) => this.newMulti(p.valueType ?? "WORK", p.value)),
      emails: (c.emails ?? []).map((p) => this.newMulti(p.valueType ?? "WORK", p.value)),
      uf: {},
    };
    for (const [k, v] of Object.entries(c.uf ?? {})) {
      const n = this.normaliseUf(k, v, false);
      if (n !== undefined) contact.uf[k] = n;
    }
    this.contacts.set(contact.id, contact);
    return contact;
  }

  /** Marks a Contact changed now (what every successful write does). */
  touch(c: { updatedTime: number }): void {
    c.updatedTime = this.clock();
  }

  createItem(p: SmartProcessDef, fields: Partial<Omit<StoredItem, "id" | "entityTypeId">>): StoredItem {
    const t = this.clock();
    const item: StoredItem = {
      id: this.nextItemId++,
      entityTypeId: p.entityTypeId,
      title: fields.title ?? "",
      stageId: fields.stageId ?? (p.stages[0] as string),
      categoryId: fields.categoryId ?? p.categoryId,
      assignedById: fields.assignedById ?? 1,
      opened: fields.opened ?? true,
      contactId: fields.contactId ?? null,
      createdTime: t,
      updatedTime: t,
      uf: { ...(fields.uf ?? {}) },
    };
    this.items.set(item.id, item);
    return item;
  }

  /** The legacy (crm.contact.get/list) view: strings, UPPER_CASE, multifields only when non-empty. */
  legacyContact(c: StoredContact): Record<string, unknown> {
    const iso = (ms: number) => formatPortalTime(ms, this.utcOffsetMinutes);
    const row: Record<string, unknown> = {
      ID: String(c.id),
      NAME: c.name,
      LAST_NAME: c.lastName,
      SECOND_NAME: c.secondName,
      OPENED: c.opened ? "Y" : "N",
      TYPE_ID: "CLIENT",
      ASSIGNED_BY_ID: String(c.assignedById),
      HAS_PHONE: c.phones.length > 0 ? "Y" : "N",
      HAS_EMAIL: c.emails.length > 0 ? "Y" : "N",
      DATE_CREATE: iso(c.createdTime),
      DATE_MODIFY: iso(c.updatedTime),
    };
    const multi = (typeId: string, list: StoredMulti[]) =>
      list.map((m) => ({ ID: String(m.id), VALUE_TYPE: m.valueType, VALUE: m.value, TYPE_ID: typeId }));
    if (c.phones.length > 0) row.PHONE = multi("PHONE", c.phones);
    if (c.emails.length > 0) row.EMAIL = multi("EMAIL", c.emails);
    for (const f of this.userFields) {
      const v = c.uf[f.fieldName];
      // Legacy reads return stored scalars as strings (a boolean UF is "1"/"0"; UNCONFIRMED, see
      // reference §9) and null when empty.
      row[f.fieldName] = v === undefined || v === null ? null : String(v);
    }
    return row;
  }

  /** The universal (crm.item.*) view of a Contact: camelCase, numbers, Y/N, fm multifields. */
  itemContact(c: StoredContact, originalUfNames = false): Record<string, unknown> {
    const iso = (ms: number) => formatPortalTime(ms, this.utcOffsetMinutes);
    const row: Record<string, unknown> = {
      id: c.id,
      name: c.name,
      lastName: c.lastName,
      secondName: c.secondName,
      opened: c.opened ? "Y" : "N",
      typeId: "CLIENT",
      assignedById: c.assignedById,
      createdTime: iso(c.createdTime),
      updatedTime: iso(c.updatedTime),
      fm: [
        ...c.phones.map((m) => ({ id: m.id, typeId: "PHONE", valueType: m.valueType, value: m.value })),
        ...c.emails.map((m) => ({ id: m.id, typeId: "EMAIL", valueType: m.valueType, value: m.value })),
      ],
    };
    for (const f of this.userFields) {
      const v = c.uf[f.fieldName];
      const key = originalUfNames ? f.fieldName : ufRestName(f.fieldName);
      if (v === undefined || v === null) row[key] = f.userTypeId === "boolean" ? "N" : null;
      else if (f.userTypeId === "boolean") row[key] = v === 1 ? "Y" : "N";
      else if (f.userTypeId === "enumeration") row[key] = Number(v);
      else row[key] = v;
    }
    return row;
  }

  /** The universal view of a smart-process item. */
  itemView(i: StoredItem): Record<string, unknown> {
    const iso = (ms: number) => formatPortalTime(ms, this.utcOffsetMinutes);
    return {
      id: i.id,
      entityTypeId: i.entityTypeId,
      title: i.title,
      stageId: i.stageId,
      categoryId: i.categoryId,
      assignedById: i.assignedById,
      opened: i.opened ? "Y" : "N",
      contactId: i.contactId,
      createdTime: iso(i.createdTime),
      updatedTime: iso(i.updatedTime),
      ...i.uf,
    };
  }
}

/** UF_CRM_<digits> -> ufCrm_<digits>; SPA fields UF_CRM_<t>_<n> -> ufCrm<t>_<n> (reference §6). */
export function ufRestName(physical: string): string {
  const spa = /^UF_CRM_(\d+)_(\d+)$/.exec(physical);
  if (spa) return `ufCrm${spa[1]}_${spa[2]}`;
  const m = /^UF_CRM_(\d+)$/.exec(physical);
  return m ? `ufCrm_${m[1]}` : physical;
}
