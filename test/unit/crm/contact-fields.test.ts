import test from "ava";
import fc from "fast-check";
import {
  type CitizenshipItem,
  createCitizenshipDictionary,
  decodeRegistered,
  encodeRegistered,
  isValidEmail,
  isValidRuPhone,
  type MultiValue,
  parseCitizenshipList,
  parseLegacyContact,
  phoneChange,
  pickEmail,
  planPhoneUpdate,
} from "../../../src/crm/contact-fields.js";
import { configureHashKey, piiHash } from "../../../src/hash.js";

test("phones: only +7 and ten digits are valid; nothing is repaired", (t) => {
  t.true(isValidRuPhone("+79991234567"));
  for (const bad of [
    "89991234567",
    "79991234567",
    "+7 999 123 45 67",
    "+7(999)1234567",
    "+7-999-123-45-67",
    "+7999123456",
    "+799912345678",
    "+19991234567",
    " +79991234567",
    "+79991234567 ",
    "",
    null,
    12345,
  ]) {
    t.false(isValidRuPhone(bad), String(bad));
  }
});

test("phones: any +7 followed by exactly ten digits passes, any other length fails", (t) => {
  t.notThrows(() =>
    fc.assert(
      fc.property(
        fc.stringMatching(/^\d{0,14}$/),
        (digits) => isValidRuPhone(`+7${digits}`) === (digits.length === 10),
      ),
    ),
  );
});

const m = (value: string, valueType = "WORK", id: number | null = 1): MultiValue => ({
  id,
  valueType,
  value,
});

test("email pick: the first valid WORK address wins over an earlier HOME one", (t) => {
  t.is(
    pickEmail([m("home@example.com", "HOME"), m("not an email", "WORK"), m("work@example.com", "WORK")]),
    "work@example.com",
  );
});

test("email pick: without a valid WORK address, the first valid one", (t) => {
  t.is(
    pickEmail([m("broken@", "WORK"), m("first@example.org", "OTHER"), m("second@example.org", "HOME")]),
    "first@example.org",
  );
});

test("email pick: nothing valid gives null (the App field is cleared)", (t) => {
  t.is(pickEmail([m("a b@c.d"), m("@example.com"), m("x@localhost")]), null);
  t.is(pickEmail([]), null);
});

test("email syntax", (t) => {
  t.true(isValidEmail("ivan.petrov+crm@mail.example.ru"));
  t.false(isValidEmail("ivan@example"));
  t.false(isValidEmail("ivan@@example.com"));
  t.false(isValidEmail(`${"a".repeat(250)}@example.com`));
});

test("phone update: the number already on the Contact means nothing to send", (t) => {
  t.is(planPhoneUpdate([m("+79990000001", "MOBILE", 11)], "+79990000001"), null);
});

test("phone update: the old App number is overwritten by its entry ID, never appended", (t) => {
  const plan = planPhoneUpdate(
    [m("+79990000009", "WORK", 10), m("+79990000001", "MOBILE", 11)],
    "+79990000002",
    "+79990000001",
  );
  t.deepEqual(plan, { entryId: 11, valueType: "MOBILE" });
  t.deepEqual(plan && phoneChange(plan, "+79990000002"), {
    ID: "11",
    VALUE: "+79990000002",
    VALUE_TYPE: "MOBILE",
  });
});

test("phone update: the overwritten entry keeps its type (a WORK number stays WORK)", (t) => {
  const plan = planPhoneUpdate([m("+79990000001", "WORK", 12)], "+79990000002", "+79990000001");
  t.deepEqual(plan && phoneChange(plan, "+79990000002"), {
    ID: "12",
    VALUE: "+79990000002",
    VALUE_TYPE: "WORK",
  });
  const untyped = planPhoneUpdate([m("+79990000001", "", 13)], "+79990000002", "+79990000001");
  t.deepEqual(untyped, { entryId: 13, valueType: "MOBILE" }, "an entry without a type becomes MOBILE");
});

test("phone update: with neither number present it appends one MOBILE entry and keeps the others", (t) => {
  const plan = planPhoneUpdate([m("+79990000009", "WORK", 10)], "+79990000002", "+79990000001");
  t.deepEqual(plan, { append: true });
  t.deepEqual(plan && phoneChange(plan, "+79990000002"), { VALUE: "+79990000002", VALUE_TYPE: "MOBILE" });
});

test("phone update: an entry without an ID cannot be overwritten, so the number is appended", (t) => {
  t.deepEqual(planPhoneUpdate([m("+79990000001", "WORK", null)], "+79990000002", "+79990000001"), {
    append: true,
  });
});

test("phone update works the same on hashes, which is how the workflow plans without storing numbers", (t) => {
  configureHashKey("contact-fields-test-hash-key-0123456789");
  const h = (v: string) => piiHash("phone", v) as string;
  const entries = [m(h("+79990000009"), "WORK", 10), m(h("+79990000001"), "HOME", 11)];
  for (const [desired, previous] of [
    ["+79990000002", "+79990000001"],
    ["+79990000009", "+79990000001"],
    ["+79990000003", "+79990000004"],
  ] as const) {
    const plain = planPhoneUpdate(
      entries.map((e) => ({ ...e, value: e.id === 10 ? "+79990000009" : "+79990000001" })),
      desired,
      previous,
    );
    t.deepEqual(planPhoneUpdate(entries, h(desired), h(previous)), plain);
  }
});

test("the phone written is refused unless it is +7XXXXXXXXXX", (t) => {
  t.throws(() => phoneChange({ append: true }, "8 999 000 00 02"), { instanceOf: RangeError });
});

test("registration flag: written as 1/0, read in every form the portal uses", (t) => {
  t.is(encodeRegistered(true), 1);
  t.is(encodeRegistered(false), 0);
  t.is(encodeRegistered(true, "Y"), "Y");
  t.is(encodeRegistered(false, "Y"), "N");
  t.is(encodeRegistered(true, "1"), 1);
  for (const v of [1, "1", "Y", true]) t.true(decodeRegistered(v));
  for (const v of [0, "0", "N", false]) t.false(decodeRegistered(v));
  for (const v of [null, undefined, "", "maybe"]) t.is(decodeRegistered(v), null);
});

const NAMES = { userId: "UF_CRM_1", registered: "UF_CRM_2", citizenship: "UF_CRM_3" };

test("legacy Contact rows parse into records; a row without an ID is refused", (t) => {
  const rec = parseLegacyContact(
    {
      ID: "42",
      NAME: "Ivan",
      PHONE: [{ ID: "7", VALUE_TYPE: "MOBILE", VALUE: "+79991234567", TYPE_ID: "PHONE" }],
      EMAIL: [{ ID: "8", VALUE_TYPE: "WORK", VALUE: "ivan@example.com", TYPE_ID: "EMAIL" }],
      UF_CRM_1: "0b7e7dbd-4fcb-4b38-8d56-1f7c0d1f6b0e",
      UF_CRM_2: "1",
      UF_CRM_3: "45",
      DATE_CREATE: "2024-08-15T10:38:21+03:00",
      DATE_MODIFY: "2024-08-16T10:38:21+03:00",
    },
    NAMES,
  );
  t.deepEqual(rec, {
    id: 42,
    name: "Ivan",
    phones: [{ id: 7, valueType: "MOBILE", value: "+79991234567" }],
    emails: [{ id: 8, valueType: "WORK", value: "ivan@example.com" }],
    userId: "0b7e7dbd-4fcb-4b38-8d56-1f7c0d1f6b0e",
    registered: true,
    citizenshipEnumId: "45",
    createdAt: "2024-08-15T10:38:21+03:00",
    updatedAt: "2024-08-16T10:38:21+03:00",
  });
  const empty = parseLegacyContact(
    { ID: "5", NAME: "", UF_CRM_1: null, UF_CRM_2: null, UF_CRM_3: "" },
    NAMES,
  );
  t.like(empty, {
    id: 5,
    name: null,
    phones: [],
    emails: [],
    userId: null,
    registered: null,
    citizenshipEnumId: null,
  });
  t.is(parseLegacyContact({ NAME: "no id" }, NAMES), null);
  t.is(parseLegacyContact([], NAMES), null);
});

test("citizenship list parses the enumeration of the named field only", (t) => {
  const result = [
    { FIELD_NAME: "UF_CRM_9", USER_TYPE_ID: "string" },
    {
      FIELD_NAME: "UF_CRM_3",
      USER_TYPE_ID: "enumeration",
      LIST: [
        { ID: "45", SORT: "10", VALUE: "Россия", DEF: "N", XML_ID: "RU" },
        { ID: "46", SORT: "20", VALUE: "Казахстан", DEF: "N", XML_ID: "KZ" },
      ],
    },
  ];
  t.deepEqual(parseCitizenshipList(result, "UF_CRM_3"), {
    field: "present",
    items: [
      { id: "45", value: "Россия", xmlId: "RU", sort: 10 },
      { id: "46", value: "Казахстан", xmlId: "KZ", sort: 20 },
    ],
  });
  // A field the portal does not have (deleted, renamed): a successful answer, not a malformed one.
  t.deepEqual(parseCitizenshipList(result, "UF_CRM_404"), { field: "missing", items: [] });
  t.deepEqual(parseCitizenshipList([], "UF_CRM_3"), { field: "missing", items: [] });
  t.deepEqual(parseCitizenshipList([{ FIELD_NAME: "UF_CRM_3", LIST: [] }], "UF_CRM_3"), {
    field: "present",
    items: [],
  });
  t.is(parseCitizenshipList({}, "UF_CRM_3"), null);
});

function fakeClock(start = 1_000_000) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

test("citizenship dictionary: cached for its TTL, reloaded after it", async (t) => {
  const clock = fakeClock();
  let loads = 0;
  const items: CitizenshipItem[] = [{ id: "45", value: "Россия", xmlId: "RU", sort: 10 }];
  const dict = createCitizenshipDictionary({
    ttlMs: 60_000,
    now: clock.now,
    load: async () => {
      loads++;
      return { field: "present", items };
    },
  });
  t.like(await dict.resolve("45"), { found: true, item: { value: "Россия" } });
  clock.advance(59_000);
  await dict.resolve("45");
  t.is(loads, 1);
  clock.advance(2_000);
  await dict.resolve("45");
  t.is(loads, 2);
});

test("citizenship dictionary: an unknown ID refreshes once, then is reported unknown (never empty)", async (t) => {
  const clock = fakeClock();
  let list: CitizenshipItem[] = [{ id: "45", value: "Россия", xmlId: null, sort: null }];
  let loads = 0;
  const dict = createCitizenshipDictionary({
    ttlMs: 3_600_000,
    minRefreshIntervalMs: 30_000,
    now: clock.now,
    load: async () => {
      loads++;
      return { field: "present", items: list };
    },
  });
  await dict.resolve("45");
  clock.advance(31_000);
  // A portal admin added an element after our load: the refresh finds it.
  list = [...list, { id: "50", value: "Армения", xmlId: null, sort: null }];
  t.like(await dict.resolve("50"), { found: true, item: { value: "Армения" } });
  t.is(loads, 2);
  clock.advance(31_000);
  const unknown = await dict.resolve("999");
  t.false(unknown.found);
  t.is(loads, 3, "one refresh for the unknown ID");
  const again = await dict.resolve("999");
  t.false(again.found);
  t.is(loads, 3, "no second refresh inside the minimum interval");
});

test("citizenship dictionary: concurrent lookups share one load; findByValue trims", async (t) => {
  let loads = 0;
  const dict = createCitizenshipDictionary({
    ttlMs: 60_000,
    load: async () => {
      loads++;
      await new Promise((r) => setTimeout(r, 20));
      return { field: "present", items: [{ id: "46", value: "Казахстан ", xmlId: null, sort: null }] };
    },
  });
  const [a, b, c] = await Promise.all([
    dict.resolve("46"),
    dict.resolve("46"),
    dict.findByValue(" Казахстан"),
  ]);
  t.true(a.found && b.found);
  t.is(c?.id, "46");
  t.is(loads, 1);
});

test("citizenship dictionary: a failed load is not cached, and is retried after a backoff, not at once", async (t) => {
  const clock = fakeClock();
  let fail = true;
  let loads = 0;
  const dict = createCitizenshipDictionary({
    ttlMs: 3_600_000,
    minRefreshIntervalMs: 30_000,
    now: clock.now,
    load: async () => {
      loads++;
      if (fail) throw new Error("CRM down");
      return { field: "present", items: [{ id: "45", value: "Россия", xmlId: null, sort: null }] };
    },
  });
  await t.throwsAsync(() => dict.resolve("45"), { message: "CRM down" });
  t.is(dict.state(), "unavailable");
  fail = false;
  // Every batch of a backlog asks; none reads again inside the backoff.
  for (let i = 0; i < 50; i++) await t.throwsAsync(() => dict.findByValue("Россия"), { message: "CRM down" });
  t.is(loads, 1);
  clock.advance(30_000);
  t.true((await dict.resolve("45")).found);
  t.is(loads, 2);
  t.is(dict.state(), "ready");
});

test("citizenship dictionary: failures back off 30 s, 60 s, 120 s ... up to the TTL", async (t) => {
  const clock = fakeClock();
  let loads = 0;
  const dict = createCitizenshipDictionary({
    ttlMs: 200_000,
    minRefreshIntervalMs: 30_000,
    now: clock.now,
    load: async () => {
      loads++;
      throw new Error("CRM down");
    },
  });
  const attemptsAt: number[] = [];
  for (let s = 0; s <= 1_000; s++) {
    const before = loads;
    await dict.findByValue("x").catch(() => undefined);
    if (loads > before) attemptsAt.push(s);
    clock.advance(1_000);
  }
  t.deepEqual(attemptsAt.slice(0, 6), [0, 30, 90, 210, 410, 610]);
});

test("citizenship dictionary: a failed refresh keeps the list in use", async (t) => {
  const clock = fakeClock();
  let fail = false;
  const dict = createCitizenshipDictionary({
    ttlMs: 60_000,
    now: clock.now,
    load: async () => {
      if (fail) throw new Error("CRM down");
      return { field: "present", items: [{ id: "45", value: "Россия", xmlId: null, sort: null }] };
    },
  });
  t.true((await dict.resolve("45")).found);
  fail = true;
  clock.advance(61_000);
  t.true((await dict.resolve("45")).found, "the stale list answers while the portal fails");
  t.is(dict.state(), "ready");
});

for (const [what, list, state] of [
  ["a missing field", { field: "missing", items: [] }, "field_missing"],
  ["an empty list", { field: "present", items: [] }, "list_empty"],
] as const) {
  test(`citizenship dictionary: ${what} is cached for the TTL like a list`, async (t) => {
    const clock = fakeClock();
    let loads = 0;
    const reads: string[] = [];
    const dict = createCitizenshipDictionary({
      ttlMs: 3_600_000,
      minRefreshIntervalMs: 30_000,
      now: clock.now,
      load: async () => {
        loads++;
        return { field: list.field, items: [...list.items] };
      },
      onRead: (s) => reads.push(s.outcome),
    });
    for (let i = 0; i < 100; i++) {
      t.is(await dict.findByValue("Россия"), null);
      clock.advance(10_000);
    }
    // 1 000 s of batches: one read.
    t.is(loads, 1);
    t.is(dict.state(), state);
    // Unknown IDs read again once per ID, not once per lookup.
    clock.advance(30_000);
    t.false((await dict.resolve("45")).found);
    t.false((await dict.resolve("45")).found);
    clock.advance(30_000);
    t.false((await dict.resolve("45")).found);
    t.is(loads, 2, "one refresh for ID 45 in the TTL");
    t.deepEqual(reads, [state, state]);
    clock.advance(3_600_000);
    await dict.findByValue("Россия");
    t.is(loads, 3, "read again after the TTL");
  });
}

test("citizenship dictionary: each unknown ID refreshes once per TTL, and never more often than the minimum interval", async (t) => {
  const clock = fakeClock();
  let loads = 0;
  const dict = createCitizenshipDictionary({
    ttlMs: 3_600_000,
    minRefreshIntervalMs: 30_000,
    now: clock.now,
    load: async () => {
      loads++;
      return { field: "present", items: [{ id: "45", value: "Россия", xmlId: null, sort: null }] };
    },
  });
  await dict.resolve("45");
  for (let i = 0; i < 20; i++) {
    // A new unknown ID every 5 s: refreshes are still 30 s apart at least.
    await dict.resolve(String(1000 + i));
    clock.advance(5_000);
  }
  t.true(loads <= 1 + Math.ceil(100 / 30), `${loads} loads`);
  const before = loads;
  clock.advance(60_000);
  // Those IDs already refreshed once in this TTL (1000 came inside the minimum interval and did not).
  await dict.resolve("1006");
  await dict.resolve("1012");
  t.is(loads, before);
});
