import test from "ava";
import {
  buildRequest,
  type CatalogueContext,
  COMMAND_TYPES,
  CommandDataError,
  type CrmCommand,
  isCommandType,
  isWrite,
  methodOf,
  parseResult,
} from "../../../src/crm/catalogue.js";

const CTX: CatalogueContext = {
  fields: {
    userId: "UF_CRM_1785934432398",
    registered: "UF_CRM_1778692456",
    citizenship: "UF_CRM_1768493029",
  },
};
const UID = "0b7e7dbd-4fcb-4b38-8d56-1f7c0d1f6b0e";

test("the catalogue is the closed set of eleven command types, alphabetical", (t) => {
  t.deepEqual(
    [...COMMAND_TYPES],
    [
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
    ],
  );
  t.deepEqual([...COMMAND_TYPES].sort(), [...COMMAND_TYPES]);
  t.true(isCommandType("contact.read"));
  t.false(isCommandType("crm.contact.get"));
});

test("each type maps to its REST method; exactly the creates and updates are writes", (t) => {
  const methods = Object.fromEntries(COMMAND_TYPES.map((c) => [c, methodOf(c)]));
  t.deepEqual(methods, {
    "alert.add": "crm.item.add",
    "alert.get": "crm.item.get",
    "alert.list": "crm.item.list",
    "alert.update": "crm.item.update",
    "citizenship.list": "crm.contact.userfield.list",
    "contact.add": "crm.contact.add",
    "contact.find_by_phone": "crm.duplicate.findbycomm",
    "contact.find_by_user_id": "crm.contact.list",
    "contact.list_changed": "crm.item.list",
    "contact.read": "crm.contact.list",
    "contact.update": "crm.contact.update",
  });
  t.deepEqual(COMMAND_TYPES.filter(isWrite), ["alert.add", "alert.update", "contact.add", "contact.update"]);
});

test("find_by_user_id: the legacy list filtered by the user id field's physical name, IDs only", (t) => {
  t.deepEqual(buildRequest({ type: "contact.find_by_user_id", params: { userId: UID } }, CTX), {
    method: "crm.contact.list",
    params: { select: ["ID"], filter: { [CTX.fields.userId]: UID }, order: { ID: "ASC" } },
  });
  t.throws(() => buildRequest({ type: "contact.find_by_user_id", params: { userId: "not-a-uuid" } }, CTX), {
    instanceOf: CommandDataError,
  });
  t.deepEqual(parseResult("contact.find_by_user_id", [{ ID: "7" }, { ID: "12" }], CTX), {
    contactIds: [7, 12],
  });
  t.deepEqual(parseResult("contact.find_by_user_id", [], CTX), { contactIds: [] });
  t.is(parseResult("contact.find_by_user_id", [{ ID: "x" }], CTX), null);
});

test("find_by_phone: PHONE search among Contacts, at most 20 numbers, +7 only", (t) => {
  t.deepEqual(buildRequest({ type: "contact.find_by_phone", params: { phones: ["+79991234567"] } }, CTX), {
    method: "crm.duplicate.findbycomm",
    params: { entity_type: "CONTACT", type: "PHONE", values: ["+79991234567"] },
  });
  const twentyOne = Array.from({ length: 21 }, (_, i) => `+7999000${String(i).padStart(4, "0")}`);
  t.throws(() => buildRequest({ type: "contact.find_by_phone", params: { phones: twentyOne } }, CTX), {
    instanceOf: CommandDataError,
  });
  const e = t.throws(() =>
    buildRequest({ type: "contact.find_by_phone", params: { phones: ["89991234567"] } }, CTX),
  );
  t.is((e as CommandDataError).code, "invalid_phone");
});

test("find_by_phone parses [] as no match and {CONTACT:[...]} as IDs", (t) => {
  t.deepEqual(parseResult("contact.find_by_phone", [], CTX), { contactIds: [] });
  t.deepEqual(parseResult("contact.find_by_phone", { CONTACT: [275, 2297] }, CTX), {
    contactIds: [275, 2297],
  });
  t.deepEqual(parseResult("contact.find_by_phone", { LEAD: [1] }, CTX), { contactIds: [] });
  t.is(parseResult("contact.find_by_phone", { CONTACT: "x" }, CTX), null);
  t.is(parseResult("contact.find_by_phone", [1], CTX), null);
});

test("read: a minimal named select, multifields named explicitly, filter by IDs", (t) => {
  const r = buildRequest({ type: "contact.read", params: { ids: [3, 1] } }, CTX);
  t.is(r.method, "crm.contact.list");
  t.deepEqual(r.params.select, [
    "ID",
    "NAME",
    "PHONE",
    "EMAIL",
    "DATE_CREATE",
    "DATE_MODIFY",
    "UF_CRM_1785934432398",
    "UF_CRM_1778692456",
    "UF_CRM_1768493029",
  ]);
  t.deepEqual(r.params.filter, { "@ID": [3, 1] });
  t.throws(() => buildRequest({ type: "contact.read", params: { ids: [] } }, CTX));
  t.throws(() =>
    buildRequest({ type: "contact.read", params: { ids: Array.from({ length: 51 }, (_, i) => i + 1) } }, CTX),
  );
  t.is(parseResult("contact.read", { ID: "1" }, CTX), null);
  t.deepEqual(parseResult("contact.read", [], CTX), { contacts: [] });
});

test("add: phone, user_id, registration flag as 1; no sonet event", (t) => {
  const r = buildRequest(
    {
      type: "contact.add",
      params: { phone: "+79991234567", userId: UID, registered: true, name: "Ivan", citizenshipEnumId: "45" },
    },
    CTX,
  );
  t.deepEqual(r, {
    method: "crm.contact.add",
    params: {
      fields: {
        PHONE: [{ VALUE: "+79991234567", VALUE_TYPE: "MOBILE" }],
        UF_CRM_1785934432398: UID,
        UF_CRM_1778692456: 1,
        NAME: "Ivan",
        UF_CRM_1768493029: "45",
      },
      params: { REGISTER_SONET_EVENT: "N" },
    },
  });
  t.deepEqual(parseResult("contact.add", 77, CTX), { contactId: 77 });
  t.deepEqual(parseResult("contact.add", "77", CTX), { contactId: 77 });
  t.is(parseResult("contact.add", true, CTX), null);
  const bad = t.throws(() =>
    buildRequest(
      { type: "contact.add", params: { phone: "+7 999 123-45-67", userId: UID, registered: true } },
      CTX,
    ),
  );
  t.is((bad as CommandDataError).code, "invalid_phone");
});

test("update: only the fields given, phone entries keep their IDs, clearing user_id sends empty", (t) => {
  const r = buildRequest(
    {
      type: "contact.update",
      params: {
        id: 9,
        userId: null,
        registered: false,
        phones: [{ ID: "15", VALUE: "+79990000002", VALUE_TYPE: "MOBILE" }],
      },
    },
    CTX,
  );
  t.deepEqual(r.params, {
    id: 9,
    fields: {
      UF_CRM_1785934432398: "",
      UF_CRM_1778692456: 0,
      PHONE: [{ ID: "15", VALUE: "+79990000002", VALUE_TYPE: "MOBILE" }],
    },
    params: { REGISTER_SONET_EVENT: "N" },
  });
  t.throws(() => buildRequest({ type: "contact.update", params: { id: 9 } }, CTX), {
    message: /nothing to update/,
  });
  t.deepEqual(parseResult("contact.update", true, CTX), { updated: true });
  t.is(parseResult("contact.update", false, CTX), null);
});

test("list_changed: §10.2 filter with the REST field name, keyset paging, start=-1", (t) => {
  const r = buildRequest(
    { type: "contact.list_changed", params: { updatedSince: "2026-08-05T09:00:00Z", afterId: 120 } },
    CTX,
  );
  t.deepEqual(r, {
    method: "crm.item.list",
    params: {
      entityTypeId: 3,
      select: ["id"],
      filter: { ">=updatedTime": "2026-08-05T09:00:00+00:00", opened: "Y", ufCrm_1778692456: 1, ">id": 120 },
      order: { id: "ASC" },
      start: -1,
    },
  });
  t.throws(() =>
    buildRequest({ type: "contact.list_changed", params: { updatedSince: "2026-08-05T09:00:00" } }, CTX),
  );
  const full = { items: Array.from({ length: 50 }, (_, i) => ({ id: i + 121 })) };
  t.deepEqual(parseResult("contact.list_changed", full, CTX), {
    ids: full.items.map((i) => i.id),
    lastId: 170,
    complete: false,
    total: null,
  });
  t.deepEqual(parseResult("contact.list_changed", { items: [{ id: 5 }] }, CTX), {
    ids: [5],
    lastId: 5,
    complete: true,
    total: null,
  });
});

test("list_changed: offset paging carries total; the open-flag value is the checked setting", (t) => {
  const r = buildRequest(
    {
      type: "contact.list_changed",
      params: { updatedSince: "2026-08-05T09:00:00+03:00", start: 100, opened: "N" },
    },
    CTX,
  );
  t.deepEqual(r.params, {
    entityTypeId: 3,
    select: ["id"],
    filter: { ">=updatedTime": "2026-08-05T09:00:00+03:00", opened: "N", ufCrm_1778692456: 1 },
    order: { id: "ASC" },
    start: 100,
  });
  for (const bad of [{ start: 30 }, { start: -50 }, { opened: "yes" }]) {
    t.throws(
      () =>
        buildRequest(
          // biome-ignore lint/suspicious/noExplicitAny: deliberately invalid parameters
          { type: "contact.list_changed", params: { updatedSince: "2026-08-05T09:00:00Z", ...(bad as any) } },
          CTX,
        ),
      { instanceOf: CommandDataError },
    );
  }
  t.deepEqual(parseResult("contact.list_changed", { items: [{ id: 7 }] }, CTX, { total: 1 }), {
    ids: [7],
    lastId: 7,
    complete: true,
    total: 1,
  });
});

test("the contract forms: the flag written and filtered as Y/N, the date sent without an offset and 12 h earlier", (t) => {
  const forms: CatalogueContext = {
    fields: CTX.fields,
    forms: { registeredWrite: "Y", registeredFilter: "Y", dateFilter: "no_offset" },
  };
  const add = buildRequest(
    { type: "contact.add", params: { phone: "+79991234567", userId: UID, registered: true } },
    forms,
  );
  t.is((add.params.fields as Record<string, unknown>).UF_CRM_1778692456, "Y");
  const clear = buildRequest({ type: "contact.update", params: { id: 9, registered: false } }, forms);
  t.is((clear.params.fields as Record<string, unknown>).UF_CRM_1778692456, "N");
  const list = buildRequest(
    { type: "contact.list_changed", params: { updatedSince: "2026-08-05T09:00:00+03:00", afterId: 0 } },
    forms,
  );
  // 06:00Z minus 12 h, no offset: read in any zone from UTC-12 to UTC+14, never after 06:00Z.
  t.deepEqual(list.params.filter, {
    ">=updatedTime": "2026-08-04T18:00:00",
    opened: "Y",
    ufCrm_1778692456: "Y",
    ">id": 0,
  });
  // The documented forms when none are given, and when they are given as such.
  const documented = buildRequest(
    { type: "contact.update", params: { id: 9, registered: true } },
    { fields: CTX.fields, forms: { registeredWrite: "1", registeredFilter: "1", dateFilter: "offset" } },
  );
  t.is((documented.params.fields as Record<string, unknown>).UF_CRM_1778692456, 1);
});

test("citizenship.list asks for the one field by name", (t) => {
  t.deepEqual(buildRequest({ type: "citizenship.list", params: {} }, CTX), {
    method: "crm.contact.userfield.list",
    params: { filter: { FIELD_NAME: "UF_CRM_1768493029" } },
  });
});

test("alert commands: smart-process items by entityTypeId", (t) => {
  const add = buildRequest(
    {
      type: "alert.add",
      params: { entityTypeId: 1040, fields: { title: "x", ufCrm14_1: "fp", stageId: "DT1040_7:NEW" } },
    },
    CTX,
  );
  t.deepEqual(add, {
    method: "crm.item.add",
    params: { entityTypeId: 1040, fields: { title: "x", ufCrm14_1: "fp", stageId: "DT1040_7:NEW" } },
  });
  t.deepEqual(buildRequest({ type: "alert.get", params: { entityTypeId: 1040, id: 5 } }, CTX).params, {
    entityTypeId: 1040,
    id: 5,
  });
  t.deepEqual(buildRequest({ type: "alert.list", params: { entityTypeId: 1040, ids: [5, 6] } }, CTX).params, {
    entityTypeId: 1040,
    select: ["id", "stageId", "categoryId", "updatedTime"],
    filter: { "@id": [5, 6] },
    order: { id: "ASC" },
    start: -1,
  });
  // The lookup of an unanswered alert.add: by a user field, or by the title.
  t.deepEqual(
    buildRequest(
      { type: "alert.list", params: { entityTypeId: 1040, match: { field: "ufCrm14_1001", value: 42 } } },
      CTX,
    ).params.filter,
    { ufCrm14_1001: 42 },
  );
  t.deepEqual(
    buildRequest(
      {
        type: "alert.list",
        params: { entityTypeId: 1040, match: { field: "title", value: "Sync conflict #42: x" } },
      },
      CTX,
    ).params.filter,
    { title: "Sync conflict #42: x" },
  );
  for (const match of [
    { field: "stageId", value: "x" },
    { field: "ufCrm14_1001", value: "" },
    { field: "ufCrm14_1001", value: 1.5 },
    { field: "ID", value: 1 },
  ]) {
    t.throws(() => buildRequest({ type: "alert.list", params: { entityTypeId: 1040, match } }, CTX), {
      instanceOf: CommandDataError,
    });
  }
  t.throws(
    () =>
      buildRequest(
        {
          type: "alert.list",
          params: { entityTypeId: 1040, ids: [1], match: { field: "title", value: "t" } },
        },
        CTX,
      ),
    { instanceOf: CommandDataError },
  );
  t.throws(() =>
    buildRequest(
      { type: "alert.update", params: { entityTypeId: 1040, id: 5, fields: { "bad key": 1 } } },
      CTX,
    ),
  );
  t.like(parseResult("alert.get", { item: { id: 5, stageId: "DT1040_7:NEW", categoryId: 7 } }, CTX), {
    item: { id: 5, stageId: "DT1040_7:NEW", categoryId: 7 },
  });
  t.is(parseResult("alert.get", { item: {} }, CTX), null);
  t.is(parseResult("alert.list", { items: [{ id: 1 }, { nope: 1 }] }, CTX), null);
});

test("every command type builds and round-trips a documented result", (t) => {
  const samples: Array<[CrmCommand, unknown]> = [
    [{ type: "alert.add", params: { entityTypeId: 1040, fields: { title: "t" } } }, { item: { id: 1 } }],
    [{ type: "alert.get", params: { entityTypeId: 1040, id: 1 } }, { item: { id: 1 } }],
    [{ type: "alert.list", params: { entityTypeId: 1040, ids: [1] } }, { items: [{ id: 1 }] }],
    [
      { type: "alert.update", params: { entityTypeId: 1040, id: 1, fields: { title: "t" } } },
      { item: { id: 1 } },
    ],
    [{ type: "citizenship.list", params: {} }, [{ FIELD_NAME: "UF_CRM_1768493029", LIST: [] }]],
    [{ type: "contact.add", params: { phone: "+79991234567", userId: UID, registered: true } }, 1],
    [{ type: "contact.find_by_phone", params: { phones: ["+79991234567"] } }, []],
    [{ type: "contact.find_by_user_id", params: { userId: UID } }, [{ ID: "7" }]],
    [{ type: "contact.list_changed", params: { updatedSince: "2026-01-01T00:00:00+03:00" } }, { items: [] }],
    [{ type: "contact.read", params: { ids: [1] } }, [{ ID: "1" }]],
    [{ type: "contact.update", params: { id: 1, registered: true } }, true],
  ];
  t.deepEqual(
    samples.map(([c]) => c.type),
    [...COMMAND_TYPES],
  );
  for (const [cmd, result] of samples) {
    t.is(buildRequest(cmd, CTX).method, methodOf(cmd.type));
    t.not(parseResult(cmd.type, result, CTX), null, cmd.type);
  }
});
