// How a duplicate Contact is chosen (§4, §5.1 steps 5-6, B0–B2): of the Contacts found by the App's
// phone, one that already carries this user's id (and no other active user holds) is linked again;
// otherwise the newest wins (DATE_CREATE descending, then the higher ID), the others go into a
// duplicate_contacts alert (B2.1). If another active user holds the newest, through a link or its
// user id field, a new Contact is created and a conflict alert raised instead (B1.2, B2.2); nothing
// found: create (B0). The steps that carry it out: ../step/map-or-create.ts.
//
// The branch decision of contact.map_or_create, as a pure function so every branch is unit-tested
// without a database or a portal (test/unit/workflows/candidates.test.ts).

/** A candidate Contact found by phone, as read back (no PII: IDs, flags, times). */
export interface Candidate {
  id: number;
  /** The user_id field of the Contact, or null. */
  userId: string | null;
  registered: boolean | null;
  /** The Contact's creation time (DATE_CREATE, the spec's CREATED_TIME), ISO 8601 with offset, or null. */
  createdAt: string | null;
}

/** What the database says about who holds each candidate. */
export interface Holdings {
  /** Contact ID -> user holding its active mapping. */
  mappedTo: ReadonlyMap<number, string>;
  /** Users (from mappings and user_id fields) that are active App users. */
  activeUsers: ReadonlySet<string>;
}

export type Decision =
  /** §4 / step 5: the Contact already carries this user: restore the mapping, no create. */
  | { kind: "restore"; contactId: number; fixFlag: boolean }
  /** B1.1, B2.1 and the takeover of a Contact held by an inactive/deleted user. */
  | {
      kind: "take";
      branch: "B1.1" | "B2.1";
      contactId: number;
      /** The inactive user whose link is taken over, if any. */
      previousUserId: string | null;
      /** Other candidates (B2.1: alert about duplicates). */
      others: number[];
    }
  /** B0: nothing found. */
  | { kind: "create"; branch: "B0" }
  /** B1.2 / B2.2: the chosen Contact belongs to another active user: a new Contact and an alert. */
  | {
      kind: "create";
      branch: "B1.2" | "B2.2";
      conflictContactId: number;
      conflictUserId: string;
      candidates: number[];
    };

function createdMs(c: Candidate): number {
  const t = c.createdAt ? Date.parse(c.createdAt) : Number.NaN;
  return Number.isNaN(t) ? Number.NEGATIVE_INFINITY : t;
}

/** Newest first: createdAt descending, then the numeric ID descending as the tie-breaker. */
export function newestFirst(cs: readonly Candidate[]): Candidate[] {
  return [...cs].sort((a, b) => createdMs(b) - createdMs(a) || b.id - a.id);
}

/**
 * The active user other than `self` that holds `c`, through a mapping or its user_id field. Either
 * is enough: a mapping of an inactive user does not free a Contact whose field names an active one.
 */
export function activeHolder(c: Candidate, self: string, h: Holdings): string | null {
  const mapped = h.mappedTo.get(c.id);
  if (mapped && mapped !== self && h.activeUsers.has(mapped)) return mapped;
  if (c.userId && c.userId !== self && h.activeUsers.has(c.userId)) return c.userId;
  return null;
}

/** The inactive user whose traces `c` still carries (to close that link on takeover). */
function inactiveHolder(c: Candidate, self: string, h: Holdings): string | null {
  const mapped = h.mappedTo.get(c.id);
  if (mapped && mapped !== self) return mapped;
  if (c.userId && c.userId !== self) return c.userId;
  return null;
}

export function decide(self: string, candidates: readonly Candidate[], h: Holdings): Decision {
  if (candidates.length === 0) return { kind: "create", branch: "B0" };
  const ordered = newestFirst(candidates);
  const mine = ordered.find((c) => c.userId === self && activeHolder(c, self, h) === null);
  if (mine) return { kind: "restore", contactId: mine.id, fixFlag: mine.registered !== true };
  const [chosen] = ordered;
  if (!chosen) return { kind: "create", branch: "B0" };
  const single = ordered.length === 1;
  const holder = activeHolder(chosen, self, h);
  if (holder !== null) {
    return {
      kind: "create",
      branch: single ? "B1.2" : "B2.2",
      conflictContactId: chosen.id,
      conflictUserId: holder,
      candidates: ordered.map((c) => c.id),
    };
  }
  return {
    kind: "take",
    branch: single ? "B1.1" : "B2.1",
    contactId: chosen.id,
    previousUserId: inactiveHolder(chosen, self, h),
    others: ordered.slice(1).map((c) => c.id),
  };
}
