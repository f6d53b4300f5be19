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
    const w: UnansweredWrite = {
      step,
      commandType,
      params,
      sentAt: T0,
      givenUpAt: ms(100),
      replyDeadlineAt: ms(12_000),
      code: "server_error",
    };
    t.deepEqual(decideUnansweredWrite(w, 0), {
      action,
      resumeStep,
      at: ms(300),
      settledAt: ms(300),
    } as never);
  });
}

test("a non-idempotent write at a step with no read to come back to fails the pass", (t) => {
  const w: UnansweredWrite = {
    step: "claim_contact",
    commandType: "contact.update",
    params: { contact_id: 1, phone: { value_type: "MOBILE" } },
    sentAt: T0,
    givenUpAt: ms(100),
    replyDeadlineAt: null,
    code: "server_error",
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
    replyDeadlineAt: ms(32_000),
    code: "timeout_no_reply",
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
    replyDeadlineAt: ms(12_000),
    code: "server_error",
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
  t.deepEqual(low, { action: "resend", resumeStep: "resend_write", at: ms(150), settledAt: ms(150) });
});

test("attempts spent leave out limit refusals", (t) => {
  t.is(attemptsSpent({ attempt_count: 5, limit_hits: 2 }), 3);
  t.is(attemptsSpent({ attempt_count: 1 }), 1);
  t.is(attemptsSpent({ attempt_count: 0, limit_hits: 0 }), 0);
});

test("the unanswered time ends at the reply deadline recorded with the send marker", (t) => {
  const sent = new Date("2026-01-01T00:00:00Z");
  const at = (sec: number) => new Date(sent.getTime() + sec * 1000);
  // Sent with a 2 s window and a 10 s client deadline: out and given up by 12 s at the latest. A
  // lease that expired at 60 s (a sender that died, a database away when the reply came) or later
  // changes nothing: settled 24 s after the deadline, 36 s after the send.
  t.deepEqual(lateWriteSettledAt(sent, at(60), at(12)), at(36));
  t.deepEqual(lateWriteSettledAt(sent, at(3_600), at(12)), at(36), "recovered an hour later: the same");
  // The client gave up before its deadline (a lost connection at 2 s): counted from there, as before.
  t.deepEqual(lateWriteSettledAt(sent, at(2), at(12)), at(6));
  // No deadline recorded (a send marked by an older release): counted to the lease expiry, as before.
  t.deepEqual(lateWriteSettledAt(sent, at(60), null), at(180));
  t.deepEqual(lateWriteSettledAt(sent, at(60)), at(180));
});

// A create whose reply was lost, by why it became uncertain, with the attempts' backoff drawn at
// 100 s: [title, code, given up (s after the send), reply deadline (s), expected wait end (s)].
const createCases: Array<[string, string, number, number | null, number]> = [
  // Issue 36: the database restarted while the create was out; the reply came and could not be
  // recorded, the lease (60 s) expired, and the next claim (at 61 s) made it uncertain. Its search is
  // due at once: 36 s after the send, in the past. Before, 183 s plus up to the backoff.
  ["the sender's lease expired with the request out", "lease_expired_in_flight", 61, 12, 36],
  ["a holder that never came back, recovered an hour later", "lease_expired_in_flight", 3_600, 12, 3_600],
  ["the sender's lease expired, no reply deadline recorded", "lease_expired_in_flight", 61, null, 183],
  ["a create recorded before the process started", "issued_before_start", 0.01, 12, 0.03],
  // The portal did not answer: the backoff of the attempts counts.
  ["the client's deadline passed", "timeout_no_reply", 10, 12, 110],
  ["a 5xx answered at once", "server_error", 0.05, 12, 100.05],
];

for (const [title, code, givenUpSec, deadlineSec, expectedSec] of createCases) {
  test(`an unanswered create: ${title}`, (t) => {
    const s = (sec: number) => ms(Math.round(sec * 1000));
    const w: UnansweredWrite = {
      step: "create_contact",
      commandType: "contact.add",
      params: {},
      sentAt: T0,
      givenUpAt: s(givenUpSec),
      replyDeadlineAt: deadlineSec === null ? null : s(deadlineSec),
      code,
    };
    const d = decideUnansweredWrite(w, 100_000);
    t.is(d.action, "search");
    t.deepEqual(at(d), new Date(Math.max(s(expectedSec).getTime(), w.givenUpAt.getTime())));
  });
}

test("a holder that lost track adds no backoff, whatever the attempts spent", (t) => {
  const w: UnansweredWrite = {
    step: "update_contact",
    commandType: "contact.update",
    params: { contact_id: 1, registered: true },
    sentAt: T0,
    givenUpAt: ms(61_000),
    replyDeadlineAt: ms(12_000),
    code: "lease_expired_in_flight",
  };
  t.deepEqual(decideUnansweredWrite(w, 300_000), {
    action: "resend",
    resumeStep: "resend_write",
    at: ms(61_000),
    settledAt: ms(36_000),
  });
  t.deepEqual(at(decideUnansweredWrite({ ...w, code: "connection_lost" }, 300_000)), ms(361_000));
});

test("the wait keeps when the late execution settles: the portal's recovery cuts the backoff to it", (t) => {
  // A create answered 503 after many attempts: settled 150 ms after the send, but the backoff of its
  // attempts asks for 200 s. Once the portal answers again only the 150 ms hold.
  const w: UnansweredWrite = {
    step: "create_contact",
    commandType: "contact.add",
    params: {},
    sentAt: T0,
    givenUpAt: ms(50),
    replyDeadlineAt: ms(12_000),
    code: "server_error",
  };
  const d = decideUnansweredWrite(w, 200_000);
  t.like(d, { action: "search", at: ms(200_050), settledAt: ms(150) });
});
