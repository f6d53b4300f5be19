import test from "ava";
import type { Candidate, Holdings } from "../../../src/workflows/decide/candidates.js";
import { decideManualLink, manualDecision } from "../../../src/workflows/decide/manual.js";

const ME = "11111111-1111-4111-8111-111111111111";
const OTHER = "22222222-2222-4222-8222-222222222222";
const GONE = "33333333-3333-4333-8333-333333333333";

const c = (id: number, userId: string | null, registered: boolean | null = null): Candidate => ({
  id,
  userId,
  registered,
  createdAt: null,
});
const holdings = (mapped: Array<[number, string]>): Holdings => ({
  mappedTo: new Map(mapped),
  activeUsers: new Set([ME, OTHER]),
});

// [step_data.manual, decision]
const stored: Array<[unknown, ReturnType<typeof manualDecision>]> = [
  [
    { decision: "link_contact", contact_id: "42" },
    { decision: "link_contact", contactId: 42 },
  ],
  [{ decision: "create_contact" }, { decision: "create_contact" }],
  [{ decision: "link_contact" }, null],
  [{ decision: "link_contact", contact_id: "0" }, null],
  [{ decision: "link_contact", contact_id: "x" }, null],
  [{ decision: "retry" }, null],
  [undefined, null],
  [null, null],
  ["link_contact", null],
];
for (const [manual, expected] of stored) {
  test(`the stored decision ${JSON.stringify(manual)} reads as ${JSON.stringify(expected)}`, (t) => {
    t.deepEqual(manualDecision({ pass: 1, manual }), expected);
  });
}

// [title, read, holdings, decision]
const links: Array<[string, Candidate[], Holdings, ReturnType<typeof decideManualLink>]> = [
  [
    "a free Contact is taken",
    [c(42, null)],
    holdings([]),
    { kind: "take", contactId: 42, previousUserId: null },
  ],
  [
    "a Contact held by an inactive user is taken over",
    [c(42, GONE)],
    holdings([[42, GONE]]),
    { kind: "take", contactId: 42, previousUserId: GONE },
  ],
  [
    "a Contact already carrying this user is restored, its flag fixed",
    [c(42, ME, false)],
    holdings([]),
    { kind: "restore", contactId: 42, fixFlag: true },
  ],
  [
    "a Contact of another active user parks the workflow again",
    [c(42, OTHER)],
    holdings([]),
    { kind: "park", code: "manual_link_bound_to_other_user" },
  ],
  [
    "a Contact mapped to another active user parks it again",
    [c(42, null)],
    holdings([[42, OTHER]]),
    { kind: "park", code: "manual_link_bound_to_other_user" },
  ],
  [
    "a Contact that does not exist parks it again",
    [],
    holdings([]),
    { kind: "park", code: "manual_link_not_found" },
  ],
];
for (const [title, read, h, expected] of links) {
  test(`manual link: ${title}`, (t) => {
    t.deepEqual(decideManualLink(ME, 42, read, h), expected);
  });
}
