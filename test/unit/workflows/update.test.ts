import test from "ava";
import {
  checkUpdateRead,
  desiredPhoneHash,
  type PhonesRead,
  planContactUpdate,
} from "../../../src/workflows/decide/update.js";

const ME = "11111111-1111-4111-8111-111111111111";
const OTHER = "22222222-2222-4222-8222-222222222222";
const NEW = "hash-of-new-phone";
const OLD = "hash-of-old-phone";

test("the read for update: a missing Contact, another user's Contact, or ours", (t) => {
  t.deepEqual(checkUpdateRead(ME, { contacts: [] }), { kind: "contact_missing" });
  t.deepEqual(checkUpdateRead(ME, {}), { kind: "contact_missing" });
  t.deepEqual(checkUpdateRead(ME, { contacts: [{ id: 4, user_id: OTHER }] }), {
    kind: "user_id_mismatch",
    contactId: 4,
  });
  // An emptied user id is not another user's: the Contact is ours by the link, the id goes back.
  const emptied = { id: 4, user_id: null, registered: true, phones: [] };
  t.deepEqual(checkUpdateRead(ME, { contacts: [emptied] }), { kind: "ours", contact: emptied });
  const ours = { id: 4, user_id: ME, registered: true, phones: [] };
  t.deepEqual(checkUpdateRead(ME, { contacts: [ours] }), { kind: "ours", contact: ours });
});

const contact = (phones: PhonesRead["phones"], registered: unknown = true): PhonesRead => ({
  id: 4,
  user_id: ME,
  registered,
  phones,
});

// [title, contact, previous phone hash, plan]
const plans: Array<[string, PhonesRead, string | null | undefined, ReturnType<typeof planContactUpdate>]> = [
  [
    "the App's phone is on the Contact and the flag is set: nothing to write",
    contact([{ id: 1, type: "WORK", hash: NEW }]),
    OLD,
    { kind: "succeed", outcome: "no_change" },
  ],
  [
    "the number this service wrote last is overwritten, keeping its entry type",
    contact([
      { id: 1, type: "WORK", hash: OLD },
      { id: 2, type: "MOBILE", hash: "someone-else" },
    ]),
    OLD,
    { kind: "update", params: { contact_id: 4, phone: { entry_id: 1, value_type: "WORK" } } },
  ],
  [
    "an entry without a type is overwritten as MOBILE",
    contact([{ id: 1, hash: OLD }]),
    OLD,
    { kind: "update", params: { contact_id: 4, phone: { entry_id: 1, value_type: "MOBILE" } } },
  ],
  [
    "a number a person added is never overwritten: the App's phone is appended",
    contact([{ id: 2, type: "MOBILE", hash: "someone-else" }]),
    OLD,
    { kind: "update", params: { contact_id: 4, phone: { append: true } } },
  ],
  [
    "no snapshot of a previous phone: appended",
    contact([{ id: 1, type: "MOBILE", hash: OLD }]),
    undefined,
    { kind: "update", params: { contact_id: 4, phone: { append: true } } },
  ],
  [
    "the registration flag is off: set it, phone unchanged",
    contact([{ id: 1, type: "MOBILE", hash: NEW }], false),
    OLD,
    { kind: "update", params: { contact_id: 4, registered: true } },
  ],
  [
    "both the phone and the flag",
    contact([{ id: 1, type: "HOME", hash: OLD }], null),
    OLD,
    {
      kind: "update",
      params: { contact_id: 4, phone: { entry_id: 1, value_type: "HOME" }, registered: true },
    },
  ],
  [
    "an emptied user id is written back, with the flag",
    { id: 4, user_id: null, registered: false, phones: [{ id: 1, type: "MOBILE", hash: NEW }] },
    OLD,
    { kind: "update", params: { contact_id: 4, set_user: "self", registered: true } },
  ],
  [
    "a Contact without phones gets the App's phone appended",
    { id: 4, user_id: ME, registered: true },
    null,
    { kind: "update", params: { contact_id: 4, phone: { append: true } } },
  ],
];
for (const [title, c, previous, expected] of plans) {
  test(`update plan: ${title}`, (t) => {
    t.deepEqual(planContactUpdate(c, NEW, previous), expected);
  });
}

test("a read holding the App's phone in an older hash form: found by value, nothing appended", (t) => {
  const OLDER_FORM_OF_NEW = "v2:older-form-of-the-new-phone";
  const c = contact([
    { id: 1, type: "WORK", hash: OLDER_FORM_OF_NEW },
    { id: 2, type: "MOBILE", hash: "someone-else" },
  ]);
  const isAppPhone = (h: string) => h === OLDER_FORM_OF_NEW;
  const desired = desiredPhoneHash(c, isAppPhone, NEW);
  t.is(desired, OLDER_FORM_OF_NEW);
  t.deepEqual(planContactUpdate(c, desired, OLD), { kind: "succeed", outcome: "no_change" });
  // Compared by today's form alone, the same read would append the App's phone a second time.
  t.deepEqual(planContactUpdate(c, NEW, OLD), {
    kind: "update",
    params: { contact_id: 4, phone: { append: true } },
  });
  t.is(desiredPhoneHash(contact([{ id: 2, type: "MOBILE", hash: "someone-else" }]), isAppPhone, NEW), NEW);
});
