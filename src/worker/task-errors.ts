// What a graphile-worker task may throw: a safe code and a fixed message, nothing else. The runner
// stores a failed task's message in graphile_worker._private_jobs.last_error and logs it with the
// stack, so whatever a task throws ends up in the database and in the logs. A PostgreSQL error's
// message can quote a value (a user id, a Contact ID, a phone, a SQL parameter: `invalid input
// syntax for type uuid: "..."`, or a BS error naming a row), a zod error the payload's shape. Every
// task in tasks/ is wrapped once by `safeTask`, which turns any error into a TaskFailure carrying a
// code chosen here and a message made of the task name and that code only.
import type { Task } from "graphile-worker";
import { z } from "zod";
import { safeError } from "../db/errors.js";

/** A code a failure may carry in the clear: snake_case, as the classifier and SQL write them. */
const SAFE_CODE = /^[a-z][a-z0-9_]{1,63}$/;

/** A failed task: `code` is safe to store and log; the message is `<task> failed: <code>[ (SQLSTATE x)]`. */
export class TaskFailure extends Error {
  override name = "TaskFailure";
  constructor(
    readonly task: string,
    readonly code: string,
    readonly sqlstate?: string,
  ) {
    // The stack the runner logs holds this message and code locations (file paths, lines), no data.
    super(`${task} failed: ${code}${sqlstate ? ` (SQLSTATE ${sqlstate})` : ""}`);
  }
}

/** Thrown by a task to fail with a code of its own (e.g. a reconciliation run's error code). */
export function failTask(task: string, code: string): TaskFailure {
  return new TaskFailure(task, SAFE_CODE.test(code) ? code : "task_failed");
}

/**
 * The safe code of any error a task can meet: a TaskFailure's own, invalid_payload for the
 * payload's schema, database_error with the SQLSTATE for PostgreSQL, connection_error for a Node.js
 * network error, a CRM failure's classifier code, and task_failed for anything else. Never the
 * message.
 */
export function taskFailureOf(task: string, e: unknown): TaskFailure {
  if (e instanceof TaskFailure) return e.task === task ? e : new TaskFailure(task, e.code, e.sqlstate);
  if (e instanceof z.ZodError) return new TaskFailure(task, "invalid_payload");
  const safe = safeError(e);
  if (safe.sqlstate) return new TaskFailure(task, "database_error", safe.sqlstate);
  if (safe.code) return new TaskFailure(task, "connection_error");
  // The CRM client's errors carry the classifier's code (src/crm/redact.ts CrmError), as do the
  // alert lane's (src/alerts/).
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === "string" && SAFE_CODE.test(code)) return new TaskFailure(task, code);
  return new TaskFailure(task, "task_failed");
}

/** Wraps a task so that whatever it throws reaches graphile-worker as a TaskFailure. */
export function safeTask(identifier: string, task: Task): Task {
  return async (payload, helpers) => {
    try {
      return await task(payload, helpers);
    } catch (e) {
      throw taskFailureOf(identifier, e);
    }
  };
}
