// The code a failed task carries (src/worker/task-errors.ts): chosen from the error's kind, never
// its message.
import test from "ava";
import { z } from "zod";
import { CrmError } from "../../../src/crm/redact.js";
import { failTask, TaskFailure, taskFailureOf } from "../../../src/worker/task-errors.js";

const PHONE = "+79161234567";

test("each kind of error becomes a code; the message is the task and the code", (t) => {
  const pgError = Object.assign(new Error(`invalid input syntax for type uuid: "${PHONE}"`), {
    code: "22P02",
  });
  const cases: Array<[unknown, string]> = [
    [z.object({ force: z.boolean() }).safeParse({ force: PHONE }).error, "sync_loop failed: invalid_payload"],
    [pgError, "sync_loop failed: database_error (SQLSTATE 22P02)"],
    [
      Object.assign(new Error(`connect ECONNREFUSED ${PHONE}`), { code: "ECONNREFUSED" }),
      "sync_loop failed: connection_error",
    ],
    [
      new CrmError({
        kind: "transient",
        code: "server_error",
        httpStatus: 503,
        bitrixError: PHONE,
        spendsAttempt: true,
      }),
      "sync_loop failed: server_error",
    ],
    [Object.assign(new Error(PHONE), { code: `user ${PHONE}` }), "sync_loop failed: task_failed"],
    [new Error(`user 42 with ${PHONE}`), "sync_loop failed: task_failed"],
    [PHONE, "sync_loop failed: task_failed"],
    [failTask("sync_loop", "run_failed"), "sync_loop failed: run_failed"],
  ];
  for (const [e, message] of cases) {
    const f = taskFailureOf("sync_loop", e);
    t.true(f instanceof TaskFailure);
    t.is(f.message, message);
    t.false(String(f.stack).includes(PHONE), "the stack holds no data");
  }
  t.is(
    failTask("retention", `bad ${PHONE}`).message,
    "retention failed: task_failed",
    "an unsafe code is not used",
  );
});
