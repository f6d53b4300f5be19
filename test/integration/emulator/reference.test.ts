// The emulator against the documented examples of ../shared/reference/bitrix24-rest.md, over real
// HTTP on loopback with plain fetch (not the project's client), so the wire shapes are checked as
// a portal would send them.
import test from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { type Emulator, type EmulatorOptions, startEmulator } from "../../../tools/emulator/server.js";
import { contactWorkflowTemplate } from "../../../tools/emulator/store.js";

const F = SANDBOX_FIELDS;
const REG = "ufCrm_1778692456";
const emulators: Emulator[] = [];

async function emu(opts: Partial<EmulatorOptions> = {}): Promise<Emulator> {
  const e = await startEmulator({ fields: F, ...opts });
  emulators.push(e);
  return e;
}
test.after.always(async () => {
  await Promise.all(emulators.map((e) => e.close()));
});

// biome-ignore lint/suspicious/noExplicitAny: wire JSON, inspected field by field by the assertions
type Wire = any;

async function call(e: Emulator, method: string, body: unknown): Promise<{ status: number; json: Wire }> {
  const res = await fetch(`${e.url}${method}`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

test("webhook URL: the secret is checked; .json suffix is optional", async (t) => {
  const e = await emu();
  const ok = await call(e, "crm.contact.userfield.list.json", {});
  t.is(ok.status, 200);
  const bad = await fetch(`${e.url.replace(e.secret, "wrongsecret")}crm.contact.get`, { method: "POST" });
  t.is(bad.status, 401);
  t.deepEqual(await bad.json(), {
    error: "INVALID_CREDENTIALS",
    error_description: "Invalid request credentials",
  });
  const noAuth = await fetch(`http://${e.host}/rest/crm.contact.get`, { method: "POST" });
  t.is(noAuth.status, 401);
  t.is(((await noAuth.json()) as { error: string }).error, "NO_AUTH_FOUND");
});

test("unknown method: ERROR_METHOD_NOT_FOUND", async (t) => {
  const e = await emu();
  const r = await call(e, "crm.deal.nuke", {});
  t.is(r.status, 404);
  t.deepEqual(r.json, { error: "ERROR_METHOD_NOT_FOUND", error_description: "Method not found!" });
});

test("every success carries time with operating and operating_reset_at", async (t) => {
  const e = await emu();
  const r = await call(e, "crm.contact.add", { fields: { NAME: "A" } });
  t.is(r.status, 200);
  for (const k of [
    "start",
    "finish",
    "duration",
    "processing",
    "date_start",
    "date_finish",
    "operating_reset_at",
    "operating",
  ]) {
    t.true(k in r.json.time, k);
  }
  t.true(Number.isInteger(r.json.time.operating_reset_at));
  t.regex(r.json.time.date_start, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+03:00$/);
});

test("crm.duplicate.findbycomm: [] when nothing matches, {CONTACT:[ids]} otherwise, at most 20 oldest", async (t) => {
  const e = await emu();
  const none = await call(e, "crm.duplicate.findbycomm", {
    entity_type: "CONTACT",
    type: "PHONE",
    values: ["+79990000000"],
  });
  t.deepEqual(none.json.result, []);
  const ids: number[] = [];
  for (let i = 0; i < 23; i++) ids.push(e.store.createContact({ phones: [{ value: "+79991112233" }] }).id);
  e.store.createContact({ phones: [{ value: "+79994445566" }] });
  const hit = await call(e, "crm.duplicate.findbycomm", {
    entity_type: "CONTACT",
    type: "PHONE",
    values: ["+79991112233"],
  });
  t.deepEqual(hit.json.result, { CONTACT: ids.slice(0, 20) });
  t.true(hit.json.result.CONTACT.every(Number.isInteger));
  const tooMany = await call(e, "crm.duplicate.findbycomm", {
    type: "PHONE",
    values: Array.from({ length: 21 }, (_, i) => `+7999000${String(i).padStart(4, "0")}`),
  });
  t.is(tooMany.status, 400);
  const noType = await call(e, "crm.duplicate.findbycomm", { values: ["+79991112233"] });
  t.is(noType.status, 400);
  t.is(noType.json.error, "");
  t.is(noType.json.error_description, "Communication type is not defined.");
});

test("legacy crm.contact.*: string values, multifields with ID/TYPE_ID only when present, empty error codes", async (t) => {
  const e = await emu();
  const add = await call(e, "crm.contact.add", {
    fields: { NAME: "Иван", PHONE: [{ VALUE: "+79991234567", VALUE_TYPE: "MOBILE" }], [F.registered]: 1 },
    params: { REGISTER_SONET_EVENT: "N" },
  });
  t.true(Number.isInteger(add.json.result));
  const got = await call(e, "crm.contact.get", { id: add.json.result });
  t.is(got.json.result.ID, String(add.json.result));
  t.is(got.json.result.NAME, "Иван");
  t.like(got.json.result.PHONE[0], { VALUE: "+79991234567", VALUE_TYPE: "MOBILE", TYPE_ID: "PHONE" });
  t.regex(got.json.result.PHONE[0].ID, /^\d+$/);
  t.false("EMAIL" in got.json.result, "no EMAIL key when the Contact has none");
  t.is(got.json.result[F.registered], "1");
  t.regex(got.json.result.DATE_CREATE, /\+03:00$/);

  t.deepEqual((await call(e, "crm.contact.get", { id: 99999 })).json, {
    error: "",
    error_description: "Not found",
  });
  t.deepEqual((await call(e, "crm.contact.get", { id: "abc" })).json, {
    error: "",
    error_description: "ID is not defined or invalid.",
  });
  const upd = await call(e, "crm.contact.update", { id: 99999, fields: { NAME: "x" } });
  t.is(upd.status, 400);
  t.deepEqual(upd.json, { error: "", error_description: "Contact is not found" });
  t.deepEqual((await call(e, "crm.contact.add", { fields: "nope" })).json, {
    error: "",
    error_description: "Parameter 'fields' must be array.",
  });
});

test("multifields on update: ID overwrites, ID+DELETE or empty VALUE deletes, no ID appends (and duplicates)", async (t) => {
  const e = await emu();
  const c = e.store.createContact({
    phones: [
      { value: "+79990000001", valueType: "MOBILE" },
      { value: "+79990000002", valueType: "WORK" },
      { value: "+79990000003", valueType: "HOME" },
    ],
  });
  const [p1, p2, p3] = c.phones.map((p) => String(p.id));
  await call(e, "crm.contact.update", {
    id: c.id,
    fields: {
      PHONE: [
        { ID: p1, VALUE: "+79990000011" },
        { ID: p2, DELETE: "Y", VALUE: "+79990000002" },
        { ID: p3, VALUE: "" },
        { VALUE: "+79990000004", VALUE_TYPE: "OTHER" },
      ],
    },
  });
  const after = (await call(e, "crm.contact.get", { id: c.id })).json.result.PHONE;
  t.deepEqual(
    after.map((p: { VALUE: string; VALUE_TYPE: string }) => [p.VALUE, p.VALUE_TYPE]),
    [
      ["+79990000011", "MOBILE"],
      ["+79990000004", "OTHER"],
    ],
  );
  t.is(after[0].ID, p1, "an overwritten entry keeps its ID");
  // The trap the client avoids: re-sending the list without IDs appends copies.
  await call(e, "crm.contact.update", { id: c.id, fields: { PHONE: [{ VALUE: "+79990000011" }] } });
  const dup = (await call(e, "crm.contact.get", { id: c.id })).json.result.PHONE;
  t.is(dup.filter((p: { VALUE: string }) => p.VALUE === "+79990000011").length, 2);
});

test("updatedTime moves on every write; createdTime does not", async (t) => {
  const e = await emu();
  const c = e.store.createContact({ createdTime: Date.parse("2024-01-01T00:00:00Z") });
  const before = c.updatedTime;
  await call(e, "crm.contact.update", { id: c.id, fields: { NAME: "new" } });
  const item = (await call(e, "crm.item.get", { entityTypeId: 3, id: c.id })).json.result.item;
  t.is(item.createdTime, "2024-01-01T03:00:00+03:00");
  t.true(Date.parse(item.updatedTime) > before);
});

test("crm.item.list: 50-row pages with total/next, start=-1 fast mode, select, filters", async (t) => {
  const e = await emu();
  const base = Date.parse("2026-08-05T06:00:00Z");
  for (let i = 0; i < 120; i++) {
    e.store.createContact({
      name: `c${i}`,
      opened: i % 10 !== 0,
      createdTime: base + i * 60_000,
      updatedTime: base + i * 60_000,
      uf: { [F.registered]: i % 3 === 0 ? 0 : 1 },
    });
  }
  const p1 = await call(e, "crm.item.list", { entityTypeId: 3, select: ["id"], order: { id: "ASC" } });
  t.is(p1.json.result.items.length, 50);
  t.is(p1.json.total, 120);
  t.is(p1.json.next, 50);
  t.deepEqual(Object.keys(p1.json.result.items[0]), ["id"]);
  const last = await call(e, "crm.item.list", { entityTypeId: 3, select: ["id"], start: 100 });
  t.is(last.json.result.items.length, 20);
  t.false("next" in last.json);
  const fast = await call(e, "crm.item.list", { entityTypeId: 3, select: ["id"], start: -1 });
  t.is(fast.json.total, 0);
  t.false("next" in fast.json);
  t.is(fast.json.result.items.length, 50);

  // §10.2's query: changed since a watermark, opened, registered (a UF boolean filters as 1).
  const since = "2026-08-05T10:00:00+03:00"; // 07:00Z: rows 60..119
  const q = await call(e, "crm.item.list", {
    entityTypeId: 3,
    select: ["id"],
    filter: { ">=updatedTime": since, opened: "Y", [REG]: 1, ">id": 0 },
    order: { id: "ASC" },
    start: -1,
  });
  const want = Array.from({ length: 120 }, (_, i) => i)
    .filter((i) => i >= 60 && i % 10 !== 0 && i % 3 !== 0)
    .map((i) => i + 1);
  t.deepEqual(
    q.json.result.items.map((r: { id: number }) => r.id),
    want.slice(0, 50),
  );
  // A value without an offset is read in the portal's zone (+03:00).
  const noOffset = await call(e, "crm.item.list", {
    entityTypeId: 3,
    select: ["id"],
    filter: { ">=updatedTime": "2026-08-05T10:59:00", "<=updatedTime": "2026-08-05T11:00:00+03:00" },
  });
  t.deepEqual(
    noOffset.json.result.items.map((r: { id: number }) => r.id),
    [120],
  );
  const inIds = await call(e, "crm.item.list", {
    entityTypeId: 3,
    select: ["id"],
    filter: { "@id": [3, 5, 999] },
  });
  t.deepEqual(
    inIds.json.result.items.map((r: { id: number }) => r.id),
    [3, 5],
  );
  // Y/N is not supported for a UF boolean in crm.item.list filters (reference §6): nothing matches.
  const yn = await call(e, "crm.item.list", { entityTypeId: 3, select: ["id"], filter: { [REG]: "Y" } });
  t.deepEqual(yn.json.result.items, []);
  const bad = await call(e, "crm.item.list", { entityTypeId: 3, filter: { noSuchField: 1 } });
  t.is(bad.status, 400);
  t.is(bad.json.error, "INVALID_ARG_VALUE");
});

test("crm.item.* for Contacts: fm multifields, camelCase UF names, Y/N booleans; NOT_FOUND", async (t) => {
  const e = await emu();
  const c = e.store.createContact({
    name: "Ivan",
    phones: [{ value: "+79991234567", valueType: "MOBILE" }],
    uf: { [F.registered]: 1, [F.citizenship]: "45" },
  });
  const item = (await call(e, "crm.item.get", { entityTypeId: 3, id: c.id })).json.result.item;
  t.is(item.id, c.id);
  t.is(item[REG], "Y");
  t.is(item.ufCrm_1768493029, 45);
  t.like(item.fm[0], { typeId: "PHONE", valueType: "MOBILE", value: "+79991234567" });
  const missing = await call(e, "crm.item.get", { entityTypeId: 3, id: 4242 });
  t.is(missing.status, 400);
  t.deepEqual(missing.json, { error: "NOT_FOUND", error_description: "Element not found" });
  const noSpa = await call(e, "crm.item.add", { entityTypeId: 999, fields: {} });
  t.deepEqual(noSpa.json, { error: "NOT_FOUND", error_description: "Smart process not found" });
});

test("smart-process items: add, stages, update, get, list by @id", async (t) => {
  const e = await emu();
  const add = await call(e, "crm.item.add", {
    entityTypeId: 1040,
    fields: { title: "Duplicate contacts", ufCrm14_1: "fp-1", unknownField: "ignored" },
  });
  const item = add.json.result.item;
  t.is(item.stageId, "DT1040_7:NEW");
  t.is(item.categoryId, 7);
  t.is(item.ufCrm14_1, "fp-1");
  t.false("unknownField" in item);
  const upd = await call(e, "crm.item.update", {
    entityTypeId: 1040,
    id: item.id,
    fields: { stageId: "DT1040_7:SUCCESS" },
  });
  t.is(upd.json.result.item.stageId, "DT1040_7:SUCCESS");
  const badStage = await call(e, "crm.item.update", {
    entityTypeId: 1040,
    id: item.id,
    fields: { stageId: "NOPE" },
  });
  t.is(badStage.status, 400);
  const list = await call(e, "crm.item.list", {
    entityTypeId: 1040,
    select: ["id", "stageId"],
    filter: { "@id": [item.id] },
  });
  t.deepEqual(list.json.result.items, [{ id: item.id, stageId: "DT1040_7:SUCCESS" }]);
});

test("crm.contact.userfield.list: the enumeration field with its LIST", async (t) => {
  const e = await emu();
  const r = await call(e, "crm.contact.userfield.list", { filter: { FIELD_NAME: F.citizenship } });
  t.is(r.json.total, 1);
  const f = r.json.result[0];
  t.is(f.USER_TYPE_ID, "enumeration");
  t.is(f.ENTITY_ID, "CRM_CONTACT");
  t.like(f.LIST[0], { ID: "45", VALUE: "Россия", DEF: "N", XML_ID: "RU" });
  t.true(f.LIST.every((x: { ID: unknown }) => typeof x.ID === "string"));
});

test("batch: per-key result/result_error/result_total/result_next/result_time, empty maps as []", async (t) => {
  const e = await emu();
  for (let i = 0; i < 60; i++) e.store.createContact({ name: `n${i}` });
  const ok = await call(e, "batch", {
    halt: 0,
    cmd: {
      list: "crm.item.list?entityTypeId=3&select%5B0%5D=id",
      get: "crm.contact.get?id=1",
    },
  });
  t.is(ok.status, 200);
  t.deepEqual(ok.json.result.result_error, []);
  t.is(ok.json.result.result_total.list, 60);
  t.is(ok.json.result.result_next.list, 50);
  t.false("get" in ok.json.result.result_next);
  t.is(ok.json.result.result.get.ID, "1");
  t.true("operating" in ok.json.result.result_time.get);
  t.truthy(ok.json.time);

  const mixed = await call(e, "batch", {
    halt: 0,
    cmd: {
      a: "crm.contact.get?id=1",
      b: "crm.contact.get?id=9999",
      c: "batch?cmd%5Bx%5D=crm.contact.get",
      d: "crm.contact.update?id=2&fields%5BNAME%5D=Z",
    },
  });
  t.deepEqual(Object.keys(mixed.json.result.result), ["a", "d"]);
  t.deepEqual(mixed.json.result.result_error.b, { error: "", error_description: "Not found" });
  t.is(mixed.json.result.result_error.c.error, "ERROR_BATCH_METHOD_NOT_ALLOWED");
  t.deepEqual(mixed.json.result.result_total, [], "no list command: an empty map is []");
  t.deepEqual(mixed.json.result.result_next, []);
  t.is(e.store.contacts.get(2)?.name, "Z");

  const halted = await call(e, "batch", {
    halt: 1,
    cmd: { a: "crm.contact.get?id=9999", b: "crm.contact.update?id=3&fields%5BNAME%5D=never" },
  });
  t.deepEqual(halted.json.result.result, []);
  t.deepEqual(Object.keys(halted.json.result.result_error), ["a"]);
  t.is(e.store.contacts.get(3)?.name, "n2", "halt=1 stopped before the update");

  const cmd = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, "crm.contact.get?id=1"]));
  const tooLong = await call(e, "batch", { halt: 0, cmd });
  t.is(tooLong.status, 400);
  t.is(tooLong.json.error, "ERROR_BATCH_LENGTH_EXCEEDED");
});

test("batch: references are resolved after decoding (percent-encoded or not); a direct call resolves nothing", async (t) => {
  const e = await emu();
  const other = e.store.createContact({ name: "Other", phones: [{ value: "+79990000001" }] });
  const r = await call(e, "batch", {
    halt: 0,
    cmd: {
      c0: `crm.contact.get?id=${other.id}`,
      // `$result[c0][NAME]` written plainly, and percent-encoded: parse_str decodes both alike.
      c1: "crm.contact.add?fields%5BNAME%5D=$result[c0][NAME]&fields%5BLAST_NAME%5D=%24result%5Bc0%5D%5BPHONE%5D%5B0%5D%5BVALUE%5D",
      c2: "crm.contact.get?id=$result[c1]",
      c3: "crm.contact.add?fields%5BNAME%5D=%24RESULT%5Bc0%5D&fields%5BSECOND_NAME%5D=Ivan%20%24result%5Bc1%5D",
    },
  });
  t.is(r.status, 200);
  t.deepEqual(r.json.result.result_error, []);
  const id = r.json.result.result.c1;
  t.like(r.json.result.result.c2, { ID: String(id), NAME: "Other", LAST_NAME: "+79990000001" });
  // An exact `$RESULT[...]` finds nothing (the lookup is by the word as written) and becomes null;
  // a number is spliced into longer text.
  t.like(e.store.contacts.get(r.json.result.result.c3), { name: "", secondName: `Ivan ${id}` });

  const direct = await call(e, "crm.contact.add", { fields: { NAME: "$result[c0][NAME]" } });
  t.is(e.store.contacts.get(direct.json.result)?.name, "$result[c0][NAME]");
});

test("batch keys 0..n-1 come back as JSON lists, as PHP encodes them", async (t) => {
  const e = await emu();
  e.store.createContact({});
  const r = await call(e, "batch", { halt: 0, cmd: ["crm.contact.get?id=1", "crm.contact.get?id=1"] });
  t.true(Array.isArray(r.json.result.result));
  t.is(r.json.result.result.length, 2);
});

test("leaky bucket: above the threshold 503 QUERY_LIMIT_EXCEEDED; a batch counts once; it drains", async (t) => {
  let now = Date.now();
  const e = await emu({ rate: { drainPerSec: 2, threshold: 4 }, now: () => now });
  const batch = { halt: 0, cmd: { a: "crm.contact.userfield.list", b: "crm.contact.userfield.list" } };
  const statuses: number[] = [];
  for (let i = 0; i < 6; i++) statuses.push((await call(e, "batch", batch)).status);
  t.deepEqual(statuses, [200, 200, 200, 200, 503, 503], "four two-command batches fit a threshold of four");
  const refused = await call(e, "crm.contact.userfield.list", {});
  t.is(refused.status, 503);
  t.deepEqual(refused.json, { error: "QUERY_LIMIT_EXCEEDED", error_description: "Too many requests" });
  now += 500; // one request drains at 2/s
  t.is((await call(e, "crm.contact.userfield.list", {})).status, 200);
  t.is((await call(e, "crm.contact.userfield.list", {})).status, 503);
  now += 2000;
  const after = [];
  for (let i = 0; i < 5; i++) after.push((await call(e, "crm.contact.userfield.list", {})).status);
  t.deepEqual(after, [200, 200, 200, 200, 503]);
});

test("operating time: over the limit the next call of that method is 429, other methods are not; in a batch it is a per-command error", async (t) => {
  const e = await emu({
    operating: { limitSec: 0.05, costSec: { "crm.contact.get": 0.03 }, windowMs: 600_000 },
  });
  e.store.createContact({});
  const first = await call(e, "crm.contact.get", { id: 1 });
  t.is(first.json.time.operating, 0.03);
  await call(e, "crm.contact.get", { id: 1 }); // 0.06 > 0.05 after this one
  const blocked = await call(e, "crm.contact.get", { id: 1 });
  t.is(blocked.status, 429);
  t.deepEqual(blocked.json, {
    error: "OPERATION_TIME_LIMIT",
    error_description: "Method is blocked due to operation time limit.",
  });
  t.is((await call(e, "crm.contact.list", {})).status, 200, "another method is unaffected");
  const batch = await call(e, "batch", {
    halt: 0,
    cmd: { g: "crm.contact.get?id=1", l: "crm.contact.list" },
  });
  t.is(batch.status, 200);
  t.is(batch.json.result.result_error.g.error, "OPERATION_TIME_LIMIT");
  t.true(Array.isArray(batch.json.result.result.l));
  t.true(first.json.time.operating_reset_at >= Math.floor(Date.now() / 1000) + 590);
});

test("faults: latency, 5xx before execution, malformed after execution, timeout after commit, revoked credential", async (t) => {
  const e = await emu();
  e.failNext({ kind: "latency", ms: 150 });
  const t0 = Date.now();
  await call(e, "crm.contact.userfield.list", {});
  t.true(Date.now() - t0 >= 140);

  e.failNext("INTERNAL_SERVER_ERROR", { method: "crm.contact.add" });
  const five = await call(e, "crm.contact.add", { fields: { NAME: "never" } });
  t.is(five.status, 500);
  t.is(e.store.contacts.size, 0, "refused before executing");

  e.failNext("malformed");
  const res = await fetch(`${e.url}crm.contact.add`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ fields: { NAME: "written" } }),
  });
  t.is(res.status, 200);
  await t.throwsAsync(() => res.json());
  t.is(e.store.contacts.size, 1, "the write happened before the broken reply");

  e.failNext({ kind: "timeout_after_commit", holdMs: 300 });
  await t.throwsAsync(() =>
    fetch(`${e.url}crm.contact.add`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ fields: { NAME: "committed" } }),
      signal: AbortSignal.timeout(2000),
    }).then((r) => r.json()),
  );
  t.is(e.store.contacts.size, 2, "committed although no reply came");

  e.failNext(
    { kind: "command_error", error: "", description: "Access denied" },
    { method: "crm.contact.get" },
  );
  const denied = await call(e, "batch", {
    halt: 0,
    cmd: { a: "crm.contact.get?id=1", b: "crm.contact.get?id=1" },
  });
  t.deepEqual(denied.json.result.result_error.a, { error: "", error_description: "Access denied" });
  t.truthy(denied.json.result.result.b);

  e.revokeCredential();
  t.is((await call(e, "crm.contact.get", { id: 1 })).status, 401);
  e.restoreCredential();
  t.is((await call(e, "crm.contact.get", { id: 1 })).status, 200);
});

test("the request log records method, status, batch size and sub-methods", async (t) => {
  const e = await emu();
  await call(e, "batch", {
    halt: 0,
    cmd: { a: "crm.contact.list", b: "crm.duplicate.findbycomm?type=PHONE&values%5B0%5D=%2B79990000000" },
  });
  await call(e, "crm.contact.list", {});
  t.is(e.log.length, 2);
  t.like(e.log[0], {
    method: "batch",
    status: 200,
    batchSize: 2,
    commands: ["crm.contact.list", "crm.duplicate.findbycomm"],
  });
  t.like(e.log[1], {
    method: "crm.contact.list",
    status: 200,
    batchSize: null,
    commands: ["crm.contact.list"],
  });
  t.true((e.log[1]?.at ?? 0) >= (e.log[0]?.at ?? Infinity));
});

// System methods (api-reference/common/system/scope.md, method-get.md, methods.md): what preflight
// asks to learn the webhook's rights.
test("scope lists the webhook's scopes; full=true every scope of the portal", async (t) => {
  const e = await emu({ scopes: ["crm", "user"] });
  const mine = await call(e, "scope", {});
  t.is(mine.status, 200);
  t.deepEqual(mine.json.result, ["crm", "user"]);
  const all = await call(e, "scope", { full: true });
  t.true(all.json.result.includes("crm") && all.json.result.includes("task"));
});

test("method.get: isExisting and isAvailable as the docs' value combinations", async (t) => {
  const e = await emu({ scopes: ["user"] });
  t.deepEqual((await call(e, "method.get", { name: "crm.item.list" })).json.result, {
    isExisting: true,
    isAvailable: false,
  });
  t.deepEqual((await call(e, "method.get", { name: "crm.nothing.here" })).json.result, {
    isExisting: false,
    isAvailable: false,
  });
  t.deepEqual((await call(e, "method.get", { name: "batch" })).json.result, {
    isExisting: true,
    isAvailable: true,
  });
  const withCrm = await emu();
  t.deepEqual((await call(withCrm, "method.get", { name: "crm.item.list" })).json.result, {
    isExisting: true,
    isAvailable: true,
  });
  const listed = await call(withCrm, "methods", {});
  t.true(listed.json.result.includes("crm.contact.add"));
  t.true(listed.json.result.includes("method.get"));
});

test("a method outside the webhook's scopes answers insufficient_scope, directly and in a batch", async (t) => {
  const e = await emu({ scopes: ["user"] });
  const direct = await call(e, "crm.contact.list", {});
  t.is(direct.status, 401);
  t.is(direct.json.error, "insufficient_scope");
  const batch = await call(e, "batch", { halt: 0, cmd: { a: "crm.contact.list", b: "scope" } });
  t.is(batch.status, 200);
  t.is(batch.json.result.result_error.a.error, "insufficient_scope");
  t.deepEqual(batch.json.result.result.b, ["user"]);
});

test("crm.item.fields describes a Contact's list field with items and a smart process's fields", async (t) => {
  const e = await emu();
  const contact = await call(e, "crm.item.fields", { entityTypeId: 3 });
  t.is(contact.status, 200);
  const cit = contact.json.result.fields[`ufCrm_${F.citizenship.slice("UF_CRM_".length)}`];
  t.is(cit.type, "enumeration");
  t.is(cit.upperName, F.citizenship);
  t.deepEqual(cit.items[0], { ID: "45", VALUE: "Россия" });
  t.is(contact.json.result.fields[REG].type, "boolean");
  const spa = await call(e, "crm.item.fields", { entityTypeId: 1040 });
  t.is(spa.json.result.fields.ufCrm14_1001.upperName, "UF_CRM_14_1001");
  t.is(spa.json.result.fields.stageId.type, "crm_status");
  const missing = await call(e, "crm.item.fields", { entityTypeId: 999 });
  t.is(missing.status, 400);
  t.is(missing.json.error, "NOT_FOUND");
});

test("crm.category.list and crm.status.list give a smart process's category and stages", async (t) => {
  const e = await emu();
  const cats = await call(e, "crm.category.list", { entityTypeId: 1040 });
  t.is(cats.json.result.categories[0].id, 7);
  const stages = await call(e, "crm.status.list", { filter: { ENTITY_ID: "DYNAMIC_1040_STAGE_7" } });
  t.deepEqual(
    stages.json.result.map((s: Wire) => s.STATUS_ID),
    ["DT1040_7:NEW", "DT1040_7:PREPARATION", "DT1040_7:SUCCESS", "DT1040_7:FAIL"],
  );
  t.deepEqual(
    stages.json.result.map((s: Wire) => s.SEMANTICS),
    [null, null, "S", "F"],
  );
  const none = await call(e, "crm.status.list", { filter: { ENTITY_ID: "DYNAMIC_1040_STAGE_8" } });
  t.deepEqual(none.json.result, []);
});

test("a portal set up wrongly: a field missing or of another type, a list without items", async (t) => {
  const e = await emu({ userFieldTypes: { registered: null, userId: "double" }, citizenship: [] });
  const r = await call(e, "crm.contact.userfield.list", {});
  const byName = new Map(r.json.result.map((f: Wire) => [f.FIELD_NAME, f]));
  t.false(byName.has(F.registered));
  t.is((byName.get(F.userId) as Wire).USER_TYPE_ID, "double");
  t.deepEqual((byName.get(F.citizenship) as Wire).LIST, []);
});

test("crm.contact.delete and crm.item.delete: the record goes; a missing one is refused as documented", async (t) => {
  const e = await emu();
  const c = e.store.createContact({ name: "gone" });
  t.deepEqual((await call(e, "crm.contact.delete", { id: c.id })).json.result, true);
  t.false(e.store.contacts.has(c.id));
  const again = await call(e, "crm.contact.delete", { id: c.id });
  t.is(again.status, 400);
  t.deepEqual(again.json, { error: "", error_description: "Contact is not found" });

  const p = e.store.smartProcesses[0] as NonNullable<ReturnType<typeof e.store.smartProcess>>;
  const item = e.store.createItem(p, { title: "x" });
  const del = await call(e, "crm.item.delete", { entityTypeId: p.entityTypeId, id: item.id });
  t.deepEqual(del.json.result, []);
  t.false(e.store.items.has(item.id));
  const missing = await call(e, "crm.item.delete", { entityTypeId: p.entityTypeId, id: item.id });
  t.is(missing.status, 400);
  t.deepEqual(missing.json, { error: "NOT_FOUND", error_description: "Item not found" });
});

test("batch resolves $result references inside every decoded value, as the portal's core does", async (t) => {
  const e = await emu();
  const c = e.store.createContact({ name: "first" });
  // Percent-encoded in the sub-request: decoded first, then resolved (reference §3).
  const name = (v: string) => `crm.contact.add?fields%5BNAME%5D=${encodeURIComponent(v)}`;
  const r = await call(e, "batch", {
    halt: 0,
    cmd: {
      c0: `crm.contact.list?filter%5BID%5D=${c.id}&select%5B0%5D=ID`,
      whole: name("$result[c0]"),
      inside: name("probe $result[c0][0][ID] end"),
      array: name("probe $result[c0] end"),
      plain: name("no reference here"),
    },
  });
  t.deepEqual(r.json.result.result_error, []);
  const stored = (key: string) => e.store.contacts.get(Number(r.json.result.result[key]))?.name;
  t.is(stored("inside"), `probe ${c.id} end`, "a scalar inside a longer value replaces the reference");
  t.is(stored("array"), "probe $result[c0] end", "an array inside a longer value is left");
  t.is(stored("whole"), "", "the whole value became the list (an array), which is no name");
  t.is(stored("plain"), "no reference here");
  // A direct call resolves nothing.
  const direct = await call(e, "crm.contact.add", { fields: { NAME: "$result[c0]" } });
  t.is(e.store.contacts.get(direct.json.result)?.name, "$result[c0]");
});

test("bizproc.workflow.template.list: administrators only, filtered by document type, AUTO_EXECUTE as stored", async (t) => {
  const handler = "https://sync.example.test/bitrix/sync/webhook/contact?token=t&ID={=Document:ID}";
  const templates = [
    contactWorkflowTemplate(handler, 3, 11),
    {
      ...contactWorkflowTemplate(handler, 1, 12),
      DOCUMENT_TYPE: ["crm", "CCrmDocumentDeal", "DEAL"] as [string, string, string],
    },
  ];
  const e = await emu({ scopes: ["crm", "bizproc"], workflowTemplates: templates });
  const r = await call(e, "bizproc.workflow.template.list", {
    select: ["ID", "NAME", "AUTO_EXECUTE", "DOCUMENT_TYPE", "TEMPLATE"],
    filter: { MODULE_ID: "crm", ENTITY: "CCrmDocumentContact", DOCUMENT_TYPE: "CONTACT" },
  });
  t.is(r.status, 200);
  t.is(r.json.total, 1);
  t.like(r.json.result[0], { ID: "11", AUTO_EXECUTE: "3" });
  t.deepEqual(r.json.result[0].DOCUMENT_TYPE, ["crm", "CCrmDocumentContact", "CONTACT"]);
  t.is(r.json.result[0].TEMPLATE[0].Children[0].Properties.Handler, handler);
  const byArray = await call(e, "bizproc.workflow.template.list", {
    filter: { DOCUMENT_TYPE: ["crm", "CCrmDocumentDeal", "DEAL"] },
  });
  t.deepEqual(byArray.json.result, [{ ID: "12" }], "SELECT defaults to ID");

  const notAdmin = await emu({
    scopes: ["crm", "bizproc"],
    workflowTemplates: templates,
    bizprocAdmin: false,
  });
  const denied = await call(notAdmin, "bizproc.workflow.template.list", {});
  t.is(denied.status, 400);
  t.deepEqual(denied.json, { error: "ACCESS_DENIED", error_description: "Access denied!" });
  const noScope = await call(
    await emu({ workflowTemplates: templates }),
    "bizproc.workflow.template.list",
    {},
  );
  t.is(noScope.json.error, "insufficient_scope");
});

test("portal contract variants: the boolean filter form, the boolean write form, a date filter with an offset ignored", async (t) => {
  const since = (e: Emulator) => new Date(e.store.clock() - 60_000).toISOString().replace("Z", "+00:00");
  const list = async (e: Emulator, filter: Record<string, unknown>) =>
    (await call(e, "crm.item.list", { entityTypeId: 3, select: ["id"], filter })).json.result.items.map(
      (r: { id: number }) => r.id,
    );
  const seed = (e: Emulator) => e.store.createContact({ uf: { [F.registered]: 1 } }).id;

  const documented = await emu();
  const a = seed(documented);
  t.deepEqual(await list(documented, { [REG]: 1 }), [a]);
  t.deepEqual(await list(documented, { [REG]: "Y" }), []);

  const yn = await emu({ contract: { booleanFilter: "Y/N" } });
  const b = seed(yn);
  t.deepEqual(await list(yn, { [REG]: "Y" }), [b]);
  t.deepEqual(await list(yn, { [REG]: 1 }), [], "1/0 matches nothing there");

  const lettersOnly = await emu({ contract: { booleanWrite: "Y/N" } });
  const w1 = await call(lettersOnly, "crm.contact.add", { fields: { [F.registered]: 1 } });
  const w2 = await call(lettersOnly, "crm.contact.add", { fields: { [F.registered]: "Y" } });
  t.is(lettersOnly.store.contacts.get(w1.json.result)?.uf[F.registered], 0, "1 is stored as false");
  t.is(lettersOnly.store.contacts.get(w2.json.result)?.uf[F.registered], 1);
  const numbersOnly = await emu({ contract: { booleanWrite: "1/0" } });
  const w3 = await call(numbersOnly, "crm.contact.add", { fields: { [F.registered]: "Y" } });
  t.is(numbersOnly.store.contacts.get(w3.json.result)?.uf[F.registered], 0, "Y is stored as false");

  const ignoring = await emu({ contract: { dateFilterWithOffset: "ignored" } });
  const old = ignoring.store.createContact({ updatedTime: Date.parse("2020-01-01T00:00:00Z") }).id;
  const fresh = ignoring.store.createContact({}).id;
  t.deepEqual(await list(ignoring, { ">=updatedTime": since(ignoring) }), [old, fresh], "as if absent");
  const local = new Date(ignoring.store.clock() - 60_000 + 180 * 60_000).toISOString().slice(0, 19);
  t.deepEqual(await list(ignoring, { ">=updatedTime": local }), [fresh], "a value without an offset works");
  const honouring = await emu();
  honouring.store.createContact({ updatedTime: Date.parse("2020-01-01T00:00:00Z") });
  const h = honouring.store.createContact({}).id;
  t.deepEqual(await list(honouring, { ">=updatedTime": since(honouring) }), [h]);
});
