import test from "ava";
import { MAX_PHONES_PER_SEARCH } from "../../../src/crm/catalogue.js";
import {
  afterFinalRead,
  afterPhoneSearch,
  afterReadMapped,
  afterRecoveryRead,
  candidatesOf,
  foundIds,
  recoveredBranch,
} from "../../../src/workflows/decide/map-or-create.js";

const ME = "11111111-1111-4111-8111-111111111111";
const OTHER = "22222222-2222-4222-8222-222222222222";

// [read_mapped projection, decision]
const mapped: Array<[Record<string, unknown>, ReturnType<typeof afterReadMapped>]> = [
  [{ found: false }, { kind: "search_again" }],
  [{ found: true, user_id_matches: false, registered: true }, { kind: "user_id_mismatch" }],
  [{ found: true, user_id_matches: true, registered: false }, { kind: "restore_flag" }],
  [{ found: true, user_id_matches: true, registered: null }, { kind: "restore_flag" }],
  // The user id was emptied on the linked Contact: written back with the flag.
  [{ found: true, user_id_matches: true, user_id_empty: true, registered: true }, { kind: "restore_flag" }],
  [
    { found: true, user_id_matches: true, registered: true },
    { kind: "succeed", outcome: "already_mapped" },
  ],
  // An empty projection is not a missing Contact: only found === false is.
  [{}, { kind: "restore_flag" }],
];
for (const [r, expected] of mapped) {
  test(`read_mapped ${JSON.stringify(r)} -> ${expected.kind}`, (t) => {
    t.deepEqual(afterReadMapped(r), expected);
  });
}

// [final_read projection, branch, decision]
const final: Array<[Record<string, unknown>, string | undefined, ReturnType<typeof afterFinalRead>]> = [
  [{ found: false }, "B1.1", { kind: "contact_missing" }],
  [{ found: true, user_id_matches: false }, "B1.1", { kind: "user_id_mismatch" }],
  [
    { found: true, user_id_matches: true, registered: true },
    "restore",
    { kind: "succeed", outcome: "restored" },
  ],
  [{ found: true, user_id_matches: true, registered: true }, "B1.1", { kind: "succeed", outcome: "mapped" }],
  [{ found: true, user_id_matches: true, registered: true }, "B2.1", { kind: "succeed", outcome: "mapped" }],
  [{ found: true, user_id_matches: true }, "B0+recovered", { kind: "succeed", outcome: "mapped" }],
  [{ found: true, user_id_matches: true }, undefined, { kind: "succeed", outcome: "mapped" }],
  // A link made by phone alone whose fields are held back (mapping.hold_after_phone_link).
  [
    { found: true, user_id_matches: true, registered: true, applied: false, held: true },
    "B1.1",
    { kind: "succeed", outcome: "mapped_held" },
  ],
  [{ found: true, user_id_matches: false, held: true }, "B2.1", { kind: "user_id_mismatch" }],
];
for (const [r, branch, expected] of final) {
  test(`final_read ${JSON.stringify(r)} after ${branch ?? "no branch"} -> ${"outcome" in expected ? expected.outcome : expected.kind}`, (t) => {
    t.deepEqual(afterFinalRead(r, branch), expected);
  });
}

test("phone search: nothing found creates (B0), a full page goes to a person, otherwise the candidates are read", (t) => {
  t.deepEqual(afterPhoneSearch([]), { kind: "create" });
  t.deepEqual(afterPhoneSearch([7, 5]), { kind: "read", ids: [7, 5] });
  const below = Array.from({ length: MAX_PHONES_PER_SEARCH - 1 }, (_, i) => i + 1);
  t.is(afterPhoneSearch(below).kind, "read");
  const full = Array.from({ length: MAX_PHONES_PER_SEARCH }, (_, i) => i + 1);
  t.deepEqual(afterPhoneSearch(full), { kind: "too_many", ids: full });
});

test("recovery: the newest candidate carrying this user is the create that landed", (t) => {
  const cs = [
    { id: 5, userId: ME, registered: true, createdAt: null },
    { id: 9, userId: ME, registered: true, createdAt: null },
    { id: 12, userId: OTHER, registered: true, createdAt: null },
    { id: 3, userId: null, registered: null, createdAt: null },
  ];
  t.deepEqual(afterRecoveryRead(ME, cs), { kind: "recovered", contactId: 9 });
  t.deepEqual(afterRecoveryRead(ME, cs.slice(2)), { kind: "resend_create" });
  t.deepEqual(afterRecoveryRead(ME, []), { kind: "resend_create" });
});

test("recovered branch keeps the branch that created the Contact", (t) => {
  t.is(recoveredBranch("B1.2"), "B1.2+recovered");
  t.is(recoveredBranch(undefined), "B0+recovered");
});

test("projections are parsed to IDs and candidates, tolerating missing fields", (t) => {
  t.deepEqual(foundIds({ contact_ids: [3, "4"] }), [3, 4]);
  t.deepEqual(foundIds({}), []);
  t.deepEqual(
    candidatesOf({
      contacts: [
        { id: "7", user_id: ME, registered: true, created_at: "2026-01-01T00:00:00+03:00" },
        { id: 8, user_id: 42, registered: "Y" },
      ],
    }),
    [
      { id: 7, userId: ME, registered: true, createdAt: "2026-01-01T00:00:00+03:00" },
      { id: 8, userId: null, registered: null, createdAt: null },
    ],
  );
  t.deepEqual(candidatesOf({}), []);
});
