// Named builders for workflows and CRM commands in a given state, shared by the integration tests
// (in the manner of graphile-worker's `failedJob`, `lockedJob`). Each makes a new row for a new
// user, through the SQL functions where one leads to the state, and otherwise with forceRow (guard
// triggers off), so a test starts where it means to without walking every edge.
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { forceRow, one, type Queryable } from "./sql-core.js";

/** A row of bitrix_sync.workflow_instances. */
export interface WorkflowRow {
  id: string;
  workflow_type: string;
  intent_type: string;
  user_id: string;
  state: string;
  current_step: string;
  step_data: Record<string, unknown>;
  contact_id: string | null;
  source_task_id: string | null;
  revision: number;
  processed_revision: number;
  content_hash: string | null;
  correlation_id: string;
  attempt_count: number;
  next_attempt_at: Date;
  lease_token: string | null;
  locked_by: string | null;
  locked_until: Date | null;
  outcome: string | null;
  last_error_code: string | null;
  finished_at: Date | null;
}

/** A row of bitrix_sync.crm_commands. */
export interface CommandRow {
  id: string;
  workflow_id: string | null;
  alert_id: string | null;
  command_type: string;
  params: Record<string, unknown>;
  status: string;
  revision: number;
  attempt_count: number;
  limit_hits: number;
  next_attempt_at: Date;
  deadline_at: Date;
  first_sent_at: Date | null;
  lease_token: string | null;
  locked_by: string | null;
  locked_until: Date | null;
  batch_id: string | null;
  correlation_id: string | null;
  sent_at: Date | null;
  reply_deadline_at: Date | null;
  response: Record<string, unknown> | null;
  last_error_code: string | null;
  last_http_status: number | null;
  last_bitrix_error: string | null;
  completed_at: Date | null;
}

/** A workflow and the lease token its holder presents (null when it holds no lease). */
export interface HeldWorkflow {
  id: string;
  token: string | null;
}

const FINISHED = ["succeeded", "failed", "cancelled"];
const inAMinute = () => new Date(Date.now() + 60_000);
const inTenMinutes = () => new Date(Date.now() + 600_000);

/** A new user's workflow as start_or_join_workflow creates it: `created`, no lease. */
export async function createdWorkflow(
  db: Queryable,
  opts: { userId?: string; type?: string; contentHash?: string | null } = {},
): Promise<WorkflowRow> {
  const { workflow_id } = await one<{ workflow_id: string }>(
    db,
    "select workflow_id from bitrix_sync.start_or_join_workflow($1, $2, $3, $4)",
    [
      opts.userId ?? randomUUID(),
      opts.type ?? "contact.map_or_create",
      randomUUID(),
      opts.contentHash ?? null,
    ],
  );
  return one<WorkflowRow>(db, "select * from bitrix_sync.workflow_instances where id = $1", [workflow_id]);
}

/**
 * A new workflow put straight into `state`. A running one holds a fresh lease (as a claim leaves it);
 * a waiting one holds none; a finished one has finished_at.
 */
export async function workflowIn(
  pool: pg.Pool,
  state: string,
  opts: { type?: string } = {},
): Promise<HeldWorkflow> {
  const { id } = await createdWorkflow(pool, opts);
  const token = state === "running" ? randomUUID() : null;
  await forceRow(pool, "bitrix_sync.workflow_instances", id, {
    state,
    lease_token: token,
    locked_by: token ? "wf-worker" : null,
    locked_until: token ? inTenMinutes() : null,
    finished_at: FINISHED.includes(state) ? new Date() : null,
  });
  return { id, token };
}

/** A new workflow running under a fresh lease. */
export async function runningWorkflow(pool: pg.Pool, opts: { type?: string } = {}) {
  const wf = await workflowIn(pool, "running", opts);
  return { id: wf.id, token: wf.token as string };
}

/** The step of a running workflow issues a command (issue_command): `pending`; the workflow waits. */
export function pendingCommand(
  db: Queryable,
  wf: HeldWorkflow,
  opts: { type?: string; step?: string; params?: Record<string, unknown> } = {},
): Promise<CommandRow> {
  return one<CommandRow>(db, "select * from bitrix_sync.issue_command($1, $2, $3, $4, $5)", [
    wf.id,
    wf.token,
    opts.type ?? "contact.read",
    JSON.stringify(opts.params ?? { contact_id: "42" }),
    opts.step ?? "read_contact",
  ]);
}

/** A command held by a pump under `token`, its workflow waiting under the workflow's own lease. */
export interface HeldCommand {
  cmd: CommandRow;
  token: string;
  wf: { id: string; token: string };
}

/**
 * A new command of a new workflow put straight into `leased` or `in_flight` under a fresh token
 * (no claim, so tests that use it can run concurrently). An in_flight one counts one send.
 */
export async function heldCommand(
  pool: pg.Pool,
  status: "leased" | "in_flight",
  opts: { type?: string; params?: Record<string, unknown> } = {},
): Promise<HeldCommand> {
  const wf = await runningWorkflow(pool);
  const cmd = await pendingCommand(pool, wf, opts);
  const token = randomUUID();
  await forceRow(pool, "bitrix_sync.crm_commands", cmd.id, {
    status,
    lease_token: token,
    locked_by: "pump",
    locked_until: inAMinute(),
    ...(status === "in_flight" ? { attempt_count: 1, sent_at: new Date(), first_sent_at: new Date() } : {}),
  });
  const row = await one<CommandRow>(pool, "select * from bitrix_sync.crm_commands where id = $1", [cmd.id]);
  return { cmd: row, token, wf };
}

/** A command claimed by a pump, not yet sent. */
export const leasedCommand = (pool: pg.Pool, opts: { type?: string } = {}) =>
  heldCommand(pool, "leased", opts);

/** A command whose send marker is committed: the request may have left. */
export const inFlightCommand = (
  pool: pg.Pool,
  opts: { type?: string; params?: Record<string, unknown> } = {},
) => heldCommand(pool, "in_flight", opts);

/**
 * A write that went out and got no reply (mark_command_uncertain), its workflow woken and claimed
 * again under a fresh lease: ready for begin_command_reconcile.
 */
export async function uncertainCommand(
  pool: pg.Pool,
  opts: { type?: string } = {},
): Promise<{ cmd: CommandRow; wf: { id: string; token: string } }> {
  const { cmd, token, wf } = await inFlightCommand(pool, { type: opts.type ?? "contact.add" });
  await one(pool, "select * from bitrix_sync.mark_command_uncertain($1, $2, 'crm_read_timeout')", [
    cmd.id,
    token,
  ]);
  const wfToken = randomUUID();
  await forceRow(pool, "bitrix_sync.workflow_instances", wf.id, {
    lease_token: wfToken,
    locked_by: "wf-worker",
    locked_until: inAMinute(),
  });
  return { cmd, wf: { id: wf.id, token: wfToken } };
}
