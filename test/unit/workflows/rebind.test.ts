import test from "ava";
import type { Candidate, Holdings } from "../../../src/workflows/decide/candidates.js";
import {
  clearsPrevious,
  decideRebind,
  rebindReadIds,
  rebindTarget,
} from "../../../src/workflows/decide/rebind.js";

const ME = "11111111-1111-4111-8111-111111111111";
const OTHER = "22222222-2222-4222-8222-222222222222";
const GONE = "33333333-3333-4333-8333-333333333333";

const c = (id: number, userId: string | null): Candidate => ({
  id,
  userId,
  registered: true,
  createdAt: null,
});
const holdings = (mapped: Array<[number, string]>, active: string[] = [ME, OTHER]): Holdings => ({
  mappedTo: new Map(mapped),
  activeUsers: new Set(active),
});

test("the rebind reads the target, then the previous Contact if there is one", (t) => {
  t.deepEqual(rebindReadIds({ target_contact_id: "9", previous_contact_id: "4" }), [9, 4]);
  t.deepEqual(rebindReadIds({ target_contact_id: "9", previous_contact_id: null }), [9]);
});

test("the target is found among the Contacts read by its ID", (t) => {
  const req = { target_contact_id: "9", previous_contact_id: "4" };
  t.deepEqual(rebindTarget(req, [c(4, ME), c(9, null)]), c(9, null));
  t.is(rebindTarget(req, [c(4, ME)]), undefined);
});

// [title, target, read, holdings, previous ID, decision]
const rows: Array<
  [string, Candidate, Candidate[], Holdings, string | null, ReturnType<typeof decideRebind>]
> = [
  [
    "a free target is bound; the previous Contact carrying this user is cleared",
    c(9, null),
    [c(9, null), c(4, ME)],
    holdings([[4, ME]]),
    "4",
    { kind: "bind", contactId: 9, clearPrevious: 4 },
  ],
  [
    "a previous Contact that no longer carries this user is left alone",
    c(9, null),
    [c(9, null), c(4, OTHER)],
    holdings([]),
    "4",
    { kind: "bind", contactId: 9, clearPrevious: null },
  ],
  [
    "a previous Contact that was not found is left alone",
    c(9, null),
    [c(9, null)],
    holdings([]),
    "4",
    { kind: "bind", contactId: 9, clearPrevious: null },
  ],
  [
    "no previous Contact: nothing to clear",
    c(9, null),
    [c(9, null)],
    holdings([]),
    null,
    { kind: "bind", contactId: 9, clearPrevious: null },
  ],
  [
    "a target already carrying this user is bound again",
    c(9, ME),
    [c(9, ME)],
    holdings([[9, ME]]),
    null,
    { kind: "bind", contactId: 9, clearPrevious: null },
  ],
  [
    "a target mapped to another active user is refused",
    c(9, null),
    [c(9, null)],
    holdings([[9, OTHER]]),
    null,
    { kind: "refuse", code: "target_bound_to_other_user" },
  ],
  [
    "a target whose user_id field names another active user is refused",
    c(9, OTHER),
    [c(9, OTHER)],
    holdings([]),
    null,
    { kind: "refuse", code: "target_bound_to_other_user" },
  ],
  [
    "a target held by an inactive user is taken over",
    c(9, GONE),
    [c(9, GONE)],
    holdings([[9, GONE]]),
    null,
    { kind: "bind", contactId: 9, clearPrevious: null },
  ],
  [
    // §5.4 worker step 2: the target must not carry another active user's id, whoever its mapping names.
    "a target mapped to an inactive user whose user_id field names another active user is refused",
    c(9, OTHER),
    [c(9, OTHER)],
    holdings([[9, GONE]]),
    null,
    { kind: "refuse", code: "target_bound_to_other_user" },
  ],
  [
    "a target mapped to another active user is refused even when its field names this user",
    c(9, ME),
    [c(9, ME)],
    holdings([[9, OTHER]]),
    null,
    { kind: "refuse", code: "target_bound_to_other_user" },
  ],
  [
    "a target whose field names an inactive user and no mapping is taken over",
    c(9, GONE),
    [c(9, GONE)],
    holdings([]),
    null,
    { kind: "bind", contactId: 9, clearPrevious: null },
  ],
];
for (const [title, target, read, h, previous, expected] of rows) {
  test(`rebind: ${title}`, (t) => {
    const req = { target_contact_id: String(target.id), previous_contact_id: previous };
    t.deepEqual(decideRebind(ME, req, read, target, h), expected);
  });
}

// [title, read of the previous Contact, clears]
const rechecks: Array<[string, Candidate[], boolean]> = [
  ["it still carries this user: cleared", [c(4, ME)], true],
  ["someone put another user on it meanwhile: left alone", [c(4, OTHER)], false],
  ["its user_id was emptied meanwhile (a clear that landed): left alone", [c(4, null)], false],
  ["it was deleted: left alone", [], false],
  ["only another Contact was read: left alone", [c(5, ME)], false],
];
for (const [title, read, expected] of rechecks) {
  test(`before every clear the previous Contact is read again; ${title}`, (t) => {
    t.is(clearsPrevious(ME, 4, read), expected);
  });
}
