// Commands a workflow must decide again before they are resent (§5.4 step 4, §9): a write marked
// reread_before_retry is handed back to its workflow instead of being retried as it is, and an
// unanswered write is not resent past its horizon (so a portal that never answers cannot keep a
// workflow waiting for ever).
import { randomUUID } from "node:crypto";
import test from "ava";
import { type CommandRow, pendingCommand, runningWorkflow, uncertainCommand } from "../helpers/builders.js";
import { forceRow, one } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** A write of a waiting workflow, in flight under a pump's token, first sent `sentAgoSec` ago. */
async function inFlightWrite(params: Record<string, unknown>, sentAgoSec = 1) {
  const wf = await runningWorkflow(db.pool);
  const cmd = await pendingCommand(db.pool, wf, {
    type: "contact.update",
    params,
    step: "rebind_clear_previous",
  });
  const token = randomUUID();
  const sent = new Date(Date.now() - sentAgoSec * 1000);
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, {
    status: "in_flight",
    lease_token: token,
    locked_by: "pump",
    locked_until: new Date(Date.now() + 60_000),
    attempt_count: 1,
    sent_at: sent,
    first_sent_at: sent,
  });
  return { cmd, token, wf };
}

const retry = (id: string, token: string, delaySec: number) =>
  one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.retry_command($1, $2, 'overload_limit', make_interval(secs => $3), true, 503, 'OVERLOAD_LIMIT')",
    [id, token, delaySec],
  );

const dlqRows = async (commandId: string) =>
  (
    await db.pool.query("select error_code from bitrix_sync.technical_dead_letters where command_id = $1", [
      commandId,
    ])
  ).rows;

const workflowState = async (id: string) =>
  (
    await one<{ state: string }>(db.pool, "select state from bitrix_sync.workflow_instances where id = $1", [
      id,
    ])
  ).state;

test("a reread_before_retry write that fails transiently is handed back to its workflow, not retried", async (t) => {
  const { cmd, token, wf } = await inFlightWrite({
    contact_id: 4,
    set_user: "clear",
    reread_before_retry: true,
  });
  const before = Date.now();
  const row = await retry(cmd.id, token, 30);
  t.like(row, {
    status: "dead_letter",
    last_error_code: "overload_limit",
    lease_token: null,
    last_http_status: 503,
  });
  t.is(row.response?.retry_by_workflow, true);
  const at = Date.parse(String(row.response?.retry_at));
  t.true(at >= before + 29_000 && at <= Date.now() + 31_000, "retry_at carries the delay the pump chose");
  t.deepEqual(await dlqRows(cmd.id), [], "not a technical dead letter");
  t.is(await workflowState(wf.id), "running", "the workflow is woken to decide (crm_replied)");
});

test("past its horizon a reread_before_retry write is dead-lettered like any other", async (t) => {
  const { cmd, token } = await inFlightWrite(
    { contact_id: 4, set_user: "clear", reread_before_retry: true },
    90_000,
  );
  const row = await retry(cmd.id, token, 1);
  t.like(row, { status: "dead_letter", last_error_code: "retry_horizon_exceeded" });
  t.is(row.response, null);
  t.deepEqual(await dlqRows(cmd.id), [{ error_code: "retry_horizon_exceeded" }]);
});

test("a write without the mark is retried by the pump as before", async (t) => {
  const { cmd, token, wf } = await inFlightWrite({ contact_id: 4, set_user: "self" });
  const row = await retry(cmd.id, token, 1);
  t.like(row, { status: "retry_wait", last_error_code: "overload_limit" });
  t.is(await workflowState(wf.id), "waiting_crm");
});

const reconcile = async (
  cmd: CommandRow,
  wf: { id: string; token: string },
  outcome: string,
  code: string | null,
) => {
  await db.pool.query("select bitrix_sync.begin_command_reconcile($1, $2)", [cmd.id, wf.token]);
  return one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.resolve_command_reconcile($1, $2, $3, null, $4)",
    [cmd.id, wf.token, outcome, code],
  );
};

test("an unanswered write proved safe to resend is resent within its horizon", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool, { type: "contact.update" });
  const row = await reconcile(cmd, wf, "retry", "idempotent_resend");
  t.like(row, { status: "retry_wait", last_error_code: "idempotent_resend" });
});

test("an unanswered write past its horizon is dead-lettered instead of resent", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool, { type: "contact.update" });
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, {
    first_sent_at: new Date(Date.now() - 25 * 3600_000),
  });
  const row = await reconcile(cmd, wf, "retry", "idempotent_resend");
  t.like(row, { status: "dead_letter", last_error_code: "retry_horizon_exceeded" });
  t.deepEqual(await dlqRows(cmd.id), [{ error_code: "retry_horizon_exceeded" }]);
});

test("a write superseded by a fresh read ends without a technical dead letter", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool, { type: "contact.update" });
  const row = await reconcile(cmd, wf, "superseded", "superseded_by_reread");
  t.like(row, { status: "dead_letter", last_error_code: "superseded_by_reread" });
  t.deepEqual(await dlqRows(cmd.id), []);
});
