import test from "ava";
import {
  businessStop,
  handedBack,
  isNotFound,
  READ_STEPS,
  restartsBeforeStep,
  restartsInsteadOfFinishing,
} from "../../../src/workflows/decide/pass.js";

// [title, step, pass, revision, unresolved write, restarts at the start of the step]
const beforeStep: Array<[string, string, number | undefined, number, boolean, boolean]> = [
  ["a newer intent restarts the pass at a read step", "read_mapped", 1, 2, false, true],
  ["a newer intent restarts a pass waiting for a person", "manual", 1, 2, false, true],
  ["a pass that has not started yet counts as pass 0", "find_by_phone", undefined, 1, false, true],
  ["no newer intent: the pass goes on", "read_mapped", 2, 2, false, false],
  ["a pass ahead of the revision goes on", "final_read", 3, 2, false, false],
  ["never between a write and its outcome", "create_contact", 1, 2, false, false],
  ["never at a write step of update", "update_contact", 1, 2, false, false],
  ["never while a write is uncertain or reconciled", "read_candidates", 1, 2, true, false],
  ["recovery reads wait for the create's outcome", "recover_find", 1, 2, false, false],
];
for (const [title, step, pass, revision, unresolvedWrite, expected] of beforeStep) {
  test(`before a step: ${title}`, (t) => {
    t.is(restartsBeforeStep({ step, pass, revision, unresolvedWrite }), expected);
  });
}

// [title, pass, revision, unresolved write, restarts instead of finishing]
const finishing: Array<[string, number | undefined, number, boolean, boolean]> = [
  ["a newer intent that joined during a write gets its own pass", 1, 2, false, true],
  ["no newer intent: the workflow finishes", 2, 2, false, false],
  ["an unresolved write must be resolved first: the workflow finishes", 1, 2, true, false],
  ["a pass that never started counts as pass 0", undefined, 1, false, true],
];
for (const [title, pass, revision, unresolvedWrite, expected] of finishing) {
  test(`finishing: ${title}`, (t) => {
    t.is(restartsInsteadOfFinishing({ pass, revision, unresolvedWrite }), expected);
  });
}

test("read steps are the steps whose pending outcome is a read (persisted names)", (t) => {
  t.deepEqual([...READ_STEPS].sort(), [
    "final_read",
    "find_by_phone",
    "manual",
    "manual_link_read",
    "read_candidates",
    "read_for_update",
    "read_mapped",
    "start",
  ]);
});

test("no step of contact.rebind restarts the pass: App intents are held until the rebind ends", (t) => {
  for (const step of ["rebind_read", "rebind_check_previous", "rebind_recheck_previous"]) {
    t.false(restartsBeforeStep({ step, pass: 1, revision: 2, unresolvedWrite: false }), step);
  }
});

// [status, response, handed back to the workflow]
const handed: Array<[string, Record<string, unknown> | null, boolean]> = [
  ["dead_letter", { retry_by_workflow: true, retry_at: "2026-01-01T00:00:00Z" }, true],
  ["dead_letter", null, false],
  ["dead_letter", { retry_by_workflow: false }, false],
  ["succeeded", { retry_by_workflow: true }, false],
  ["retry_wait", null, false],
];
for (const [status, response, expected] of handed) {
  test(`a ${status} command with response ${JSON.stringify(response)} is ${expected ? "" : "not "}handed back`, (t) => {
    t.is(handedBack({ status, response }), expected);
  });
}

// [status, last_error_code, stop]
const stops: Array<[string, string | null, ReturnType<typeof businessStop>]> = [
  ["dead_letter", "user_not_eligible", { kind: "not_eligible" }],
  ["dead_letter", "invalid_phone", { kind: "manual", code: "invalid_phone", alert: "invalid_phone" }],
  [
    "dead_letter",
    "unknown_citizenship",
    { kind: "manual", code: "unknown_citizenship", alert: "unknown_citizenship" },
  ],
  ["dead_letter", "http_403", null],
  ["dead_letter", null, null],
  ["succeeded", "invalid_phone", null],
  ["retry_wait", "invalid_phone", null],
];
for (const [status, code, expected] of stops) {
  test(`a ${status} command with code ${code ?? "none"} ${expected ? `stops the pass (${expected.kind})` : "is left to its step"}`, (t) => {
    t.deepEqual(businessStop({ status, last_error_code: code }), expected);
  });
}

test("not found is the not_found code only", (t) => {
  t.true(isNotFound({ last_error_code: "not_found" }));
  t.false(isNotFound({ last_error_code: null }));
  t.false(isNotFound({ last_error_code: "http_404" }));
});
