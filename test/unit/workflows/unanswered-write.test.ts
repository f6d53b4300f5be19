import test from "ava";
import { attemptsSpent, backoffDelayMs } from "../../../src/crm/backoff.js";
import {
  decideUnansweredWrite,
  lateWriteSettledAt,
  type UnansweredWrite,
} from "../../../src/workflows/decide/unanswered-write.js";

test("an unanswered write is taken as settled twice as long again as it went unanswered", (t) => {
  const sent = new Date("2026-01-01T00:00:00Z");
  // The client's 2 s deadline: settled 4 s later, 6 s after the send.
  t.deepEqual(lateWriteSettledAt(sent, new Date("2026-01-01T00:00:02Z")), new Date("2026-01-01T00:00:06Z"));
  // A sender that died: its 60 s lease expired; 120 s more.
  t.deepEqual(lateWriteSettledAt(sent, new Date("2026-01-01T00:01:00Z")), new Date("2026-01-01T00:03:00Z"));
  // No send marker (never sent), or clocks that disagree: no wait beyond the moment it was given up.
  t.deepEqual(lateWriteSettledAt(null, sent), sent);
  t.deepEqual(lateWriteSettledAt(new Date("2026-01-01T00:00:05Z"), sent), sent);
});

const T0 = new Date("2026-01-01T00:00:00.000Z");
const ms = (n: number) => new Date(T0.getTime() + n);

// [title, step, command type, params, action, resume step]: every write a workflow step issues.
const cases: Array<[string, string, string, Record<string, unknown>, string, string]> = [
  [
    "a create is searched for by its user id",
    "create_contact",
    "contact.add",
    {},
    "search",
    "recover_search",
  ],
  [
    "a claim (user id and flag) is resent",
    "claim_contact",
    "contact.update",
    { contact_id: 1, set_user: "self", registered: true },
    "resend",
    "resend_write",
  ],
  [
    "a restored flag is resent",
    "restore_flag",
    "contact.update",
    { contact_id: 1, set_user: "self", registered: true },
    "resend",
    "resend_write",
  ],
  [
    "a deactivation's flag is resent",
    "deactivate_contact",
    "contact.update",
    { contact_id: 1, registered: false },
    "resend",
    "resend_write",
  ],
  [
    "a phone overwritten by its entry ID is resent",
    "update_contact",
    "contact.update",
    { contact_id: 1, phone: { entry_id: 7, value_type: "MOBILE" } },
    "resend",
    "resend_write",
  ],
  [
    "a flag-only update is resent",
    "update_contact",
    "contact.update",
    { contact_id: 1, registered: true },
    "resend",
    "resend_write",
  ],
  [
    "an appended phone is superseded by a fresh read",
    "update_contact",
    "contact.update",
    { contact_id: 1, phone: { value_type: "MOBILE" } },
    "reread",
    "reread_for_update",
  ],
  [
    "a rebind's target is resent",
    "rebind_target",
    "contact.update",
    { contact_id: 1, set_user: "self", registered: true },
    "resend",
    "resend_write",
  ],
  [
    "a rebind's clear of the previous Contact is read again first",
    "rebind_clear_previous",
    "contact.update",
    { contact_id: 2, set_user: "clear", registered: false, reread_before_retry: true },
    "reread",
    "rebind_recheck_previous",
  ],
];

for (const [title, step, commandType, params, action, resumeStep] of cases) {
  test(`unanswered write: ${title}`, (t) => {
    const w: UnansweredWrite = { step, commandType, params, sentAt: T0, givenUpAt: ms(100) };
    t.deepEqual(decideUnansweredWrite(w, 0), { action, resumeStep, at: ms(300) } as never);
  });
}

test("a non-idempotent write at a step with no read to come back to fails the pass", (t) => {
  const w: UnansweredWrite = {
    step: "claim_contact",
    commandType: "contact.update",
    params: { contact_id: 1, phone: { value_type: "MOBILE" } },
    sentAt: T0,
    givenUpAt: ms(100),
  };
  t.deepEqual(decideUnansweredWrite(w, 0), { action: "fail", code: "unknown_step" });
});

function at(d: ReturnType<typeof decideUnansweredWrite>): Date | undefined {
  return "at" in d ? d.at : undefined;
}

test("every wait is the later of the late execution's settling and the backoff", (t) => {
  const base: UnansweredWrite = {
    step: "update_contact",
    commandType: "contact.update",
    params: { contact_id: 1, registered: true },
    sentAt: T0,
    givenUpAt: ms(30_000), // a 30 s timeout: settled 60 s later
  };
  t.deepEqual(at(decideUnansweredWrite(base, 5_000)), ms(90_000), "settling is later");
  t.deepEqual(at(decideUnansweredWrite(base, 100_000)), ms(130_000), "backoff is later");
  t.deepEqual(at(decideUnansweredWrite({ ...base, sentAt: null }, -5)), ms(30_000), "never before given up");
});

test("a plain 503 on contact.update: resent after the backoff of its attempts, not every two response times", (t) => {
  // Answered in 50 ms: settled 100 ms later. The backoff (retry.base_ms 1000, max 300000) grows with
  // the attempts spent; limit refusals do not count.
  const retry = { baseMs: 1000, maxMs: 300_000 };
  const w: UnansweredWrite = {
    step: "update_contact",
    commandType: "contact.update",
    params: { contact_id: 1, phone: { entry_id: 7, value_type: "MOBILE" } },
    sentAt: T0,
    givenUpAt: ms(50),
  };
  const top = () => 0.999_999;
  const waits = [1, 2, 3, 4, 12].map((sent) => {
    const spent = attemptsSpent({ attempt_count: sent + 3, limit_hits: 3 });
    const d = decideUnansweredWrite(w, backoffDelayMs(spent, retry, undefined, top));
    return (at(d)?.getTime() ?? Number.NaN) - w.givenUpAt.getTime();
  });
  t.deepEqual(waits, [1000, 2000, 4000, 8000, 300_000]);
  // At the bottom of the jitter the late execution's settling still holds.
  const low = decideUnansweredWrite(
    w,
    backoffDelayMs(1, retry, undefined, () => 0),
  );
  t.deepEqual(low, { action: "resend", resumeStep: "resend_write", at: ms(150) });
});

test("attempts spent leave out limit refusals", (t) => {
  t.is(attemptsSpent({ attempt_count: 5, limit_hits: 2 }), 3);
  t.is(attemptsSpent({ attempt_count: 1 }), 1);
  t.is(attemptsSpent({ attempt_count: 0, limit_hits: 0 }), 0);
});
