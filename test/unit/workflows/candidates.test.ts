import test from "ava";
import {
  type Candidate,
  decide,
  type Holdings,
  newestFirst,
} from "../../../src/workflows/decide/candidates.js";

const ME = "11111111-1111-4111-8111-111111111111";
const OTHER = "22222222-2222-4222-8222-222222222222";
const GONE = "33333333-3333-4333-8333-333333333333";

const none: Holdings = { mappedTo: new Map(), activeUsers: new Set([ME, OTHER]) };
const c = (
  id: number,
  createdAt: string | null,
  userId: string | null = null,
  registered: boolean | null = null,
): Candidate => ({
  id,
  createdAt,
  userId,
  registered,
});

test("B0: no candidates -> create", (t) => {
  t.deepEqual(decide(ME, [], none), { kind: "create", branch: "B0" });
});

test("B1.1: one free Contact -> take it", (t) => {
  t.deepEqual(decide(ME, [c(5, "2026-01-01T00:00:00+03:00")], none), {
    kind: "take",
    branch: "B1.1",
    contactId: 5,
    previousUserId: null,
    others: [],
  });
});

test("B1.2: one Contact of another active user (by field or by mapping) -> create + conflict", (t) => {
  const byField = decide(ME, [c(5, null, OTHER)], none);
  t.like(byField, { kind: "create", branch: "B1.2", conflictContactId: 5, conflictUserId: OTHER });
  const byMapping = decide(ME, [c(5, null)], { ...none, mappedTo: new Map([[5, OTHER]]) });
  t.like(byMapping, { kind: "create", branch: "B1.2", conflictUserId: OTHER });
});

test("B2.1: several Contacts, newest free -> take the newest and report the others", (t) => {
  const d = decide(
    ME,
    [c(7, "2026-01-01T10:00:00Z"), c(9, "2026-01-02T10:00:00Z"), c(8, "2026-01-01T10:00:00Z")],
    none,
  );
  t.deepEqual(d, { kind: "take", branch: "B2.1", contactId: 9, previousUserId: null, others: [8, 7] });
});

test("B2.2: several Contacts, newest held by another active user -> create + alert with every candidate", (t) => {
  const d = decide(ME, [c(7, "2026-01-01T10:00:00Z"), c(9, "2026-01-02T10:00:00Z", OTHER)], none);
  t.deepEqual(d, {
    kind: "create",
    branch: "B2.2",
    conflictContactId: 9,
    conflictUserId: OTHER,
    candidates: [9, 7],
  });
});

test("newest: CREATED_TIME first, numeric ID breaks ties (offsets respected)", (t) => {
  const order = newestFirst([
    c(10, "2026-01-01T12:00:00+03:00"),
    c(2, "2026-01-01T10:00:00+00:00"),
    c(3, "2026-01-01T10:00:00Z"),
    c(99, null),
  ]).map((x) => x.id);
  t.deepEqual(order, [3, 2, 10, 99]);
});

test("a candidate already carrying this user restores the mapping without a create; flag fixed only if it differs", (t) => {
  t.deepEqual(
    decide(ME, [c(4, "2026-01-02T00:00:00Z", OTHER), c(3, "2026-01-01T00:00:00Z", ME, true)], none),
    {
      kind: "restore",
      contactId: 3,
      fixFlag: false,
    },
  );
  t.like(decide(ME, [c(3, null, ME, false)], none), { kind: "restore", fixFlag: true });
  t.like(decide(ME, [c(3, null, ME, null)], none), { kind: "restore", fixFlag: true });
});

test("a Contact holding the user_id of an inactive/deleted user is taken over", (t) => {
  const d = decide(ME, [c(6, null, GONE)], { mappedTo: new Map([[6, GONE]]), activeUsers: new Set([ME]) });
  t.deepEqual(d, { kind: "take", branch: "B1.1", contactId: 6, previousUserId: GONE, others: [] });
});
