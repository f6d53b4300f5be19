// CRM commands (§7.2, §8, §9): issued by a workflow step, claimed under a lease, marked in_flight
// before the batch leaves, then completed, retried, made uncertain or dead-lettered under the same
// token. Time is simulated by moving first_sent_at / locked_until / next_attempt_at, never by sleeping.
// Tests that call claim_commands() are serial: a claim takes every due command of this database.
import { randomUUID } from "node:crypto";
import test from "ava";
import {
  type CommandRow,
  heldCommand,
  inFlightCommand,
  leasedCommand,
  pendingCommand,
  runningWorkflow,
  uncertainCommand,
  type WorkflowRow,
} from "../helpers/builders.js";
import { claimCommands } from "../helpers/claims.js";
import { withSettings } from "../helpers/settings.js";
import { forceRow, logTransitions, one, pathOf, rejectsWith, session } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  await logTransitions(db.pool, "bitrix_sync.crm_commands", "status");
});
test.after.always(async () => {
  await db?.drop();
});

interface DeadLetter {
  source: string;
  source_id: string;
  workflow_id: string | null;
  command_id: string | null;
  operation: string;
  error_code: string;
  http_status: number | null;
  bitrix_error: string | null;
  attempt_count: number;
  first_attempt_at: Date | null;
  deadline_at: Date | null;
  correlation_id: string | null;
}

const claim = claimCommands<CommandRow>;

async function send(ids: string[], tokens: (string | null)[], batch = randomUUID()): Promise<string[]> {
  const { rows } = await db.pool.query<{ send_commands: string }>(
    "select bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3)",
    [ids, tokens, batch],
  );
  return rows.map((r) => r.send_commands);
}

const get = (id: string) =>
  one<CommandRow>(db.pool, "select * from bitrix_sync.crm_commands where id = $1", [id]);
const workflow = (id: string) =>
  one<WorkflowRow>(db.pool, "select * from bitrix_sync.workflow_instances where id = $1", [id]);
const deadLetters = async (commandId: string) =>
  (
    await db.pool.query<DeadLetter>(
      "select * from bitrix_sync.technical_dead_letters where command_id = $1",
      [commandId],
    )
  ).rows;

// ---------------------------------------------------------------------------------------------
// issue_command
// ---------------------------------------------------------------------------------------------

test("issue_command inserts a pending command and moves the workflow running -> waiting_crm", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const cmd = await pendingCommand(db.pool, wf, { type: "contact.find_by_phone", step: "find_by_phone" });
  const w = await workflow(wf.id);
  t.like(cmd, {
    workflow_id: wf.id,
    command_type: "contact.find_by_phone",
    status: "pending",
    revision: w.revision,
    correlation_id: w.correlation_id,
    attempt_count: 0,
    lease_token: null,
  });
  t.deepEqual(cmd.params, { contact_id: "42" });
  t.like(w, { state: "waiting_crm", current_step: "find_by_phone", lease_token: null });
});

test("issue_command refuses a stale workflow token or a workflow that is not running (BS001)", async (t) => {
  const wf = await runningWorkflow(db.pool);
  await rejectsWith(t, pendingCommand(db.pool, { id: wf.id, token: randomUUID() }), "BS001");
  await rejectsWith(t, pendingCommand(db.pool, { id: randomUUID(), token: wf.token }), "BS001");
  await pendingCommand(db.pool, wf);
  // waiting_crm now: the step was persisted and the lease released.
  await rejectsWith(t, pendingCommand(db.pool, wf), "BS001");
  const { rows } = await db.pool.query("select 1 from bitrix_sync.crm_commands where workflow_id = $1", [
    wf.id,
  ]);
  t.is(rows.length, 1);
});

test("a command type outside the closed catalogue is refused by the CHECK", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const err = await rejectsWith(t, pendingCommand(db.pool, wf, { type: "crm.contact.delete" }), "23514");
  t.is(err.constraint, "crm_commands_command_type_check");
  t.is((await workflow(wf.id)).state, "running");
});

test("a second active command for the same workflow is refused by the unique index", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const first = await pendingCommand(db.pool, wf);
  // The workflow runs again (woken without the first command finishing) under a new lease.
  const token = randomUUID();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
    state: "running",
    lease_token: token,
    locked_until: new Date(Date.now() + 60_000),
  });
  const err = await rejectsWith(
    t,
    pendingCommand(db.pool, { id: wf.id, token }, { type: "contact.update" }),
    "23505",
  );
  t.is(err.constraint, "crm_commands_one_active_per_workflow_uq");
  t.is((await workflow(wf.id)).state, "running", "the failed step moved nothing");

  // Once the first one is finished the next step may issue its command.
  await forceRow(db.pool, "bitrix_sync.crm_commands", first.id, {
    status: "succeeded",
    completed_at: new Date(),
  });
  t.like(await pendingCommand(db.pool, { id: wf.id, token }, { type: "contact.update" }), {
    status: "pending",
  });
});

test("alert commands are independent of workflows and only alert.* types", async (t) => {
  const alert = await one<{ id: string }>(
    db.pool,
    "select * from bitrix_sync.raise_business_alert('phone_conflict', 'high', $1, $2)",
    [randomUUID().replaceAll("-", "").padEnd(64, "a"), randomUUID()],
  );
  const a = await one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.issue_alert_command($1, 'alert.add', '{}')",
    [alert.id],
  );
  t.like(a, { alert_id: alert.id, workflow_id: null, status: "pending" });
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.issue_alert_command($1, 'contact.add', '{}')", [alert.id]),
    "BS004",
  );
});

// ---------------------------------------------------------------------------------------------
// claim_commands (serial)
// ---------------------------------------------------------------------------------------------

test.serial("claim_commands leases due pending commands with new tokens", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const cmd = await pendingCommand(db.pool, wf);
  const mine = (await claim(db.pool, "pump-1")).find((c) => c.id === cmd.id);
  t.like(mine, { status: "leased", locked_by: "pump-1", attempt_count: 0 });
  t.truthy(mine?.lease_token);
  t.truthy(mine?.locked_until);
  // Leased and unexpired: nobody else gets it.
  t.false((await claim(db.pool, "pump-2")).some((c) => c.id === cmd.id));
  await rejectsWith(
    t,
    db.pool.query("select * from bitrix_sync.claim_commands('p', 0, interval '60 seconds')"),
    "BS004",
  );
});

test.serial("two connections claiming at once never get the same command", async (t) => {
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) ids.push((await pendingCommand(db.pool, await runningWorkflow(db.pool))).id);

  const a = await session(db.pool);
  const b = await session(db.pool);
  try {
    await a.c.query("begin");
    await b.c.query("begin");
    const byA = (await claim(a.c, "a", 4)).map((c) => c.id);
    const byB = (await claim(b.c, "b", 1000)).map((c) => c.id);
    await a.c.query("commit");
    await b.c.query("commit");
    t.is(byA.length, 4);
    t.deepEqual(
      byA.filter((id) => byB.includes(id)),
      [],
    );
    for (const id of ids) t.true(byA.includes(id) || byB.includes(id), id);
  } finally {
    a.done();
    b.done();
  }

  for (let round = 0; round < 20; round++) {
    for (let i = 0; i < 6; i++) await pendingCommand(db.pool, await runningWorkflow(db.pool));
    const [x, y] = await Promise.all([claim(db.pool, "x", 3), claim(db.pool, "y", 3)]);
    const xs = x.map((c) => c.id);
    t.deepEqual(
      y.filter((c) => xs.includes(c.id)).map((c) => c.id),
      [],
      `round ${round}`,
    );
    t.is(x.length + y.length, 6, `round ${round}: nothing left behind`);
  }
});

test.serial("a due retry_wait command becomes claimable; one not yet due does not", async (t) => {
  const { cmd, token } = await inFlightCommand(db.pool);
  await one(db.pool, "select * from bitrix_sync.retry_command($1, $2, 'crm_timeout', '1 hour')", [
    cmd.id,
    token,
  ]);
  t.false((await claim(db.pool, "p")).some((c) => c.id === cmd.id));
  t.is((await get(cmd.id)).status, "retry_wait");

  await db.pool.query(
    "update bitrix_sync.crm_commands set next_attempt_at = now() - interval '1 second' where id = $1",
    [cmd.id],
  );
  const again = (await claim(db.pool, "p2")).find((c) => c.id === cmd.id);
  t.like(again, { status: "leased", locked_by: "p2" });
  t.not(again?.lease_token, token);
  t.deepEqual((await pathOf(db.pool, "crm_commands", cmd.id)).slice(-3), ["retry_wait", "pending", "leased"]);
});

test.serial(
  "an expired leased command is reclaimed with a new token; the old holder cannot send",
  async (t) => {
    const cmd = await pendingCommand(db.pool, await runningWorkflow(db.pool));
    const first = (await claim(db.pool, "old")).find((c) => c.id === cmd.id);
    await db.pool.query(
      "update bitrix_sync.crm_commands set locked_until = now() - interval '1 second' where id = $1",
      [cmd.id],
    );
    const second = (await claim(db.pool, "new")).find((c) => c.id === cmd.id);
    t.like(second, { status: "leased", locked_by: "new" });
    t.not(second?.lease_token, first?.lease_token);
    t.deepEqual(await send([cmd.id], [first?.lease_token ?? null]), []);
    t.deepEqual(await send([cmd.id], [second?.lease_token ?? null]), [cmd.id]);
  },
);

test.serial("an expired in_flight write becomes uncertain and wakes its workflow", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const cmd = await pendingCommand(db.pool, wf, { type: "contact.add", step: "create_contact" });
  const mine = (await claim(db.pool, "pump")).find((c) => c.id === cmd.id);
  await send([cmd.id], [mine?.lease_token ?? null]);
  t.is((await workflow(wf.id)).state, "waiting_crm");
  await db.pool.query(
    "update bitrix_sync.crm_commands set locked_until = now() - interval '1 second' where id = $1",
    [cmd.id],
  );

  t.false(
    (await claim(db.pool, "pump-2")).some((c) => c.id === cmd.id),
    "never resent blindly",
  );
  t.like(await get(cmd.id), {
    status: "uncertain",
    lease_token: null,
    locked_by: null,
    locked_until: null,
    last_error_code: "lease_expired_in_flight",
  });
  t.like(await workflow(wf.id), { state: "running", lease_token: null });
  // The holder that died must not confirm it afterwards.
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [cmd.id, mine?.lease_token]),
    "BS001",
  );
  // A later claim leaves it alone: only the workflow's reconcile moves it on.
  t.false((await claim(db.pool, "pump-3")).some((c) => c.id === cmd.id));
  t.is((await get(cmd.id)).status, "uncertain");
});

test.serial("an expired in_flight read goes to retry_wait and is due again at once", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const cmd = await pendingCommand(db.pool, wf, { type: "contact.read" });
  const mine = (await claim(db.pool, "pump")).find((c) => c.id === cmd.id);
  await send([cmd.id], [mine?.lease_token ?? null]);
  await db.pool.query(
    "update bitrix_sync.crm_commands set locked_until = now() - interval '1 second' where id = $1",
    [cmd.id],
  );

  const again = (await claim(db.pool, "pump-2")).find((c) => c.id === cmd.id);
  // A read changes nothing in the CRM, so it is simply read again (same claim, new token).
  t.deepEqual(await pathOf(db.pool, "crm_commands", cmd.id), [
    "pending",
    "leased",
    "in_flight",
    "retry_wait",
    "pending",
    "leased",
  ]);
  t.like(again, { status: "leased", locked_by: "pump-2", last_error_code: "lease_expired_in_flight" });
  t.not(again?.lease_token, mine?.lease_token);
  t.is((await workflow(wf.id)).state, "waiting_crm", "a retried read does not wake the workflow");
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [cmd.id, mine?.lease_token]),
    "BS001",
  );
});

test.serial("a stale holder is refused by every command function (BS001)", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const cmd = await pendingCommand(db.pool, wf, { type: "contact.update" });
  const old = (await claim(db.pool, "old")).find((c) => c.id === cmd.id)?.lease_token ?? null;
  await db.pool.query(
    "update bitrix_sync.crm_commands set locked_until = now() - interval '1 second' where id = $1",
    [cmd.id],
  );
  const current = (await claim(db.pool, "new")).find((c) => c.id === cmd.id)?.lease_token ?? null;
  t.truthy(current);

  // While leased by the new holder.
  t.deepEqual(await send([cmd.id], [old]), []);
  await rejectsWith(t, db.pool.query("select bitrix_sync.release_command($1, $2)", [cmd.id, old]), "BS001");
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.retry_command($1, $2, 'crm_timeout', '1 minute')", [cmd.id, old]),
    "BS001",
  );
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.dead_letter_command($1, $2, 'crm_permission_denied')", [cmd.id, old]),
    "BS001",
  );

  // In flight under the new holder.
  t.deepEqual(await send([cmd.id], [current]), [cmd.id]);
  const err = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [cmd.id, old]),
    "BS001",
  );
  t.truthy(err.hint);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.mark_command_uncertain($1, $2, 'crm_timeout')", [cmd.id, old]),
    "BS001",
  );
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.retry_command($1, $2, 'crm_timeout', '1 minute')", [cmd.id, old]),
    "BS001",
  );
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.dead_letter_command($1, $2, 'crm_permission_denied')", [cmd.id, old]),
    "BS001",
  );
  t.like(await get(cmd.id), { status: "in_flight", lease_token: current, locked_by: "new" });
  t.deepEqual(await deadLetters(cmd.id), []);
  t.like(await one(db.pool, "select * from bitrix_sync.complete_command($1, $2, '{}')", [cmd.id, current]), {
    status: "succeeded",
  });
});

// ---------------------------------------------------------------------------------------------
// send, complete, release
// ---------------------------------------------------------------------------------------------

test("send_commands marks in_flight only the commands still held under their tokens", async (t) => {
  const a = await leasedCommand(db.pool);
  const b = await leasedCommand(db.pool);
  const c = await leasedCommand(db.pool);
  const batch = randomUUID();
  const sent = await send([a.cmd.id, b.cmd.id, c.cmd.id], [a.token, randomUUID(), c.token], batch);
  t.deepEqual([...sent].sort(), [a.cmd.id, c.cmd.id].sort());
  const ra = await get(a.cmd.id);
  t.like(ra, { status: "in_flight", batch_id: batch, attempt_count: 1, lease_token: a.token });
  t.truthy(ra.sent_at);
  const horizon = await one<{ ok: boolean }>(
    db.pool,
    "select deadline_at between now() + interval '23 hours 59 minutes' and now() + interval '24 hours 1 minute' as ok from bitrix_sync.crm_commands where id = $1",
    [a.cmd.id],
  );
  t.true(horizon.ok, "the 24 h horizon starts at the first send");
  t.deepEqual(ra.first_sent_at, ra.sent_at, "the first send is stamped");
  t.like(await get(b.cmd.id), { status: "leased", sent_at: null, first_sent_at: null, attempt_count: 0 });

  // Already in flight: a second send of the same ids marks nothing.
  t.deepEqual(await send([a.cmd.id], [a.token]), []);
  await rejectsWith(t, send([a.cmd.id, b.cmd.id], [a.token]), "BS004");
  t.is((await get(a.cmd.id)).reply_deadline_at, null, "a sender that does not say records no reply deadline");
});

test("send_commands records the reply deadline the sender gives: its send window plus its HTTP timeout", async (t) => {
  const a = await leasedCommand(db.pool);
  const marked = await db.pool.query(
    "select bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3, interval '12 seconds')",
    [[a.cmd.id], [a.token], randomUUID()],
  );
  t.is(marked.rows.length, 1);
  const r = await get(a.cmd.id);
  t.is((r.reply_deadline_at as Date).getTime() - (r.sent_at as Date).getTime(), 12_000);
  const b = await leasedCommand(db.pool);
  for (const within of ["0 seconds", "-1 seconds"]) {
    await rejectsWith(
      t,
      db.pool.query(`select bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3, interval '${within}')`, [
        [b.cmd.id],
        [b.token],
        randomUUID(),
      ]),
      "BS004",
    );
  }
  t.like(await get(b.cmd.id), { status: "leased", reply_deadline_at: null });
});

test("complete_command stores the reply and wakes the workflow waiting_crm -> running", async (t) => {
  const { cmd, token, wf } = await inFlightCommand(db.pool, { type: "contact.add" });
  t.is((await workflow(wf.id)).state, "waiting_crm");
  const done = await one<CommandRow>(db.pool, "select * from bitrix_sync.complete_command($1, $2, $3)", [
    cmd.id,
    token,
    JSON.stringify({ contact_id: "1001" }),
  ]);
  t.like(done, {
    status: "succeeded",
    lease_token: null,
    locked_by: null,
    locked_until: null,
    last_error_code: null,
  });
  t.deepEqual(done.response, { contact_id: "1001" });
  t.truthy(done.completed_at);
  const w = await workflow(wf.id);
  t.like(w, { state: "running", lease_token: null });
  t.true(w.next_attempt_at.getTime() <= Date.now() + 1000, "runnable at once");
  // Completing twice is a stale completion.
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [cmd.id, token]),
    "BS001",
  );
});

test("complete_command refuses a command that was never sent (BS001)", async (t) => {
  const { cmd, token } = await leasedCommand(db.pool);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [cmd.id, token]),
    "BS001",
  );
  t.is((await get(cmd.id)).status, "leased");
});

test("release_command puts a leased command back to pending without sending it", async (t) => {
  const { cmd, token } = await leasedCommand(db.pool);
  const out = await one<CommandRow>(db.pool, "select * from bitrix_sync.release_command($1, $2)", [
    cmd.id,
    token,
  ]);
  t.like(out, {
    status: "pending",
    lease_token: null,
    locked_by: null,
    locked_until: null,
    attempt_count: 0,
  });
  // A sent command cannot be released: the request may have landed.
  const f = await inFlightCommand(db.pool);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.release_command($1, $2)", [f.cmd.id, f.token]),
    "BS001",
  );
  t.is((await get(f.cmd.id)).status, "in_flight");
});

// ---------------------------------------------------------------------------------------------
// retry, uncertain, dead letter
// ---------------------------------------------------------------------------------------------

test("retry_command spends an attempt on a failure but only counts a rate-limit refusal", async (t) => {
  const { cmd, token, wf } = await leasedCommand(db.pool);
  t.deepEqual(await send([cmd.id], [token]), [cmd.id]);
  const r1 = await one<CommandRow & { wait_ok: boolean }>(
    db.pool,
    `select c.*, c.next_attempt_at between now() + interval '29 seconds' and now() + interval '31 seconds' as wait_ok
       from bitrix_sync.retry_command($1, $2, 'crm_http_503', '30 seconds', true, 503, 'INTERNAL_SERVER_ERROR') c`,
    [cmd.id, token],
  );
  t.like(r1, {
    status: "retry_wait",
    attempt_count: 1,
    limit_hits: 0,
    last_error_code: "crm_http_503",
    last_http_status: 503,
    last_bitrix_error: "INTERNAL_SERVER_ERROR",
    lease_token: null,
    locked_by: null,
    wait_ok: true,
  });
  t.is((await workflow(wf.id)).state, "waiting_crm", "a retry is the command's business, not the workflow's");

  // Send again, this time the portal refuses for rate: an attempt is not spent.
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, {
    status: "leased",
    lease_token: token,
    locked_until: new Date(Date.now() + 60_000),
  });
  t.deepEqual(await send([cmd.id], [token]), [cmd.id]);
  const r2 = await one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.retry_command($1, $2, 'crm_query_limit_exceeded', '2 seconds', false, 503, 'QUERY_LIMIT_EXCEEDED')",
    [cmd.id, token],
  );
  t.like(r2, {
    status: "retry_wait",
    attempt_count: 2,
    limit_hits: 1,
    last_error_code: "crm_query_limit_exceeded",
  });
  t.is(r2.attempt_count - r2.limit_hits, 1, "spent attempts");
});

test("retry_command past the 24 h horizon dead-letters with retry_horizon_exceeded", async (t) => {
  const { cmd, token, wf } = await inFlightCommand(db.pool, { type: "contact.update" });
  // The first send was 23 h 59 min ago: a 5 minute back-off would cross the horizon.
  const firstSent = new Date(Date.now() - 86_400_000 + 60_000);
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, { first_sent_at: firstSent });
  const out = await one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.retry_command($1, $2, 'crm_timeout', '5 minutes', true, 504, 'GATEWAY_TIMEOUT')",
    [cmd.id, token],
  );
  t.like(out, { status: "dead_letter", last_error_code: "retry_horizon_exceeded", lease_token: null });
  t.truthy(out.completed_at);
  const dl = await deadLetters(cmd.id);
  t.is(dl.length, 1);
  t.like(dl[0], {
    source: "crm_command",
    source_id: cmd.id,
    workflow_id: wf.id,
    operation: "contact.update",
    error_code: "retry_horizon_exceeded",
    http_status: 504,
    bitrix_error: "GATEWAY_TIMEOUT",
    attempt_count: 1,
    correlation_id: cmd.correlation_id,
  });
  t.deepEqual(dl[0]?.first_attempt_at, firstSent, "the horizon counts from the first send");
  t.deepEqual(dl[0]?.deadline_at, new Date(firstSent.getTime() + 86_400_000));
  t.deepEqual(dl[0]?.deadline_at, out.deadline_at);
  t.is((await workflow(wf.id)).state, "running", "the workflow is woken to handle the failure");

  // Within the horizon the same call just waits.
  const ok = await inFlightCommand(db.pool);
  t.like(
    await one(db.pool, "select * from bitrix_sync.retry_command($1, $2, 'crm_timeout', '5 minutes')", [
      ok.cmd.id,
      ok.token,
    ]),
    { status: "retry_wait" },
  );
});

test.serial("retry_command reads the horizon from the active retry.horizon_sec", async (t) => {
  // Sent 2 h ago: a 1 minute back-off fits 24 h but not a horizon of 1 h.
  const { cmd, token } = await inFlightCommand(db.pool);
  const firstSent = new Date(Date.now() - 2 * 3_600_000);
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, { first_sent_at: firstSent });
  await withSettings(db.pool, { "retry.horizon_sec": 3600 }, async () => {
    const out = await one<CommandRow>(
      db.pool,
      "select * from bitrix_sync.retry_command($1, $2, 'crm_timeout', '1 minute')",
      [cmd.id, token],
    );
    t.like(out, { status: "dead_letter", last_error_code: "retry_horizon_exceeded" });
    t.deepEqual((await deadLetters(cmd.id))[0]?.deadline_at, new Date(firstSent.getTime() + 3_600_000));
  });
});

test("a command refused before its first send counts its horizon from its creation", async (t) => {
  const { cmd, token } = await leasedCommand(db.pool);
  t.is(cmd.first_sent_at, null);
  const created = new Date(Date.now() - 86_400_000 + 30_000);
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, { created_at: created });
  const out = await one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.retry_command($1, $2, 'crm_query_limit_exceeded', '1 minute', false)",
    [cmd.id, token],
  );
  t.is(out.status, "dead_letter");
  const dl = (await deadLetters(cmd.id))[0];
  t.deepEqual(dl?.first_attempt_at, created);
  t.deepEqual(dl?.deadline_at, new Date(created.getTime() + 86_400_000));
});

test("mark_command_uncertain: in_flight -> uncertain, and the workflow wakes", async (t) => {
  const { cmd, token, wf } = await inFlightCommand(db.pool, { type: "contact.add" });
  const out = await one<CommandRow>(
    db.pool,
    "select * from bitrix_sync.mark_command_uncertain($1, $2, 'crm_read_timeout')",
    [cmd.id, token],
  );
  t.like(out, {
    status: "uncertain",
    last_error_code: "crm_read_timeout",
    lease_token: null,
    locked_until: null,
  });
  t.is((await workflow(wf.id)).state, "running");

  const leased = await leasedCommand(db.pool);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.mark_command_uncertain($1, $2, 'crm_read_timeout')", [
      leased.cmd.id,
      leased.token,
    ]),
    "BS001",
    // Not sent yet: nothing can have landed, so it is not uncertain.
  );
  const raw = await inFlightCommand(db.pool);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.mark_command_uncertain($1, $2, 'socket hang up at 10.1.2.3')", [
      raw.cmd.id,
      raw.token,
    ]),
    "BS004",
  );
  t.is((await get(raw.cmd.id)).status, "in_flight");
});

test("dead_letter_command writes a technical dead letter with the safe code only", async (t) => {
  for (const status of ["leased", "in_flight"] as const) {
    const { cmd, token, wf } = await heldCommand(db.pool, status, { type: "contact.add" });
    const out = await one<CommandRow>(
      db.pool,
      "select * from bitrix_sync.dead_letter_command($1, $2, 'crm_invalid_field', 400, 'ERROR_CORE')",
      [cmd.id, token],
    );
    t.like(out, {
      status: "dead_letter",
      last_error_code: "crm_invalid_field",
      last_http_status: 400,
      lease_token: null,
    });
    const dl = await deadLetters(cmd.id);
    t.is(dl.length, 1, status);
    t.like(dl[0], {
      source: "crm_command",
      operation: "contact.add",
      error_code: "crm_invalid_field",
      http_status: 400,
      bitrix_error: "ERROR_CORE",
      workflow_id: wf.id,
    });
    t.is((await workflow(wf.id)).state, "running", `${status}: workflow woken`);
  }
});

test("dead_letter_command refuses raw error text and writes nothing (BS004)", async (t) => {
  const { cmd, token } = await inFlightCommand(db.pool, { type: "contact.add" });
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.dead_letter_command($1, $2, 'Field PHONE: +79991234567 is invalid')", [
      cmd.id,
      token,
    ]),
    "BS004",
  );
  await rejectsWith(
    t,
    db.pool.query(
      "select bitrix_sync.dead_letter_command($1, $2, 'crm_invalid_field', 400, 'Contact ivanov@example.com not found')",
      [cmd.id, token],
    ),
    "BS004",
  );
  await rejectsWith(
    t,
    db.pool.query(
      "select bitrix_sync.retry_command($1, $2, 'crm_http_500', '1 minute', true, 500, 'phone +79991234567 rejected')",
      [cmd.id, token],
    ),
    "BS004",
  );
  t.like(await get(cmd.id), { status: "in_flight", last_error_code: null, last_bitrix_error: null });
  t.deepEqual(await deadLetters(cmd.id), []);
});

// ---------------------------------------------------------------------------------------------
// reconcile (fenced by the workflow lease)
// ---------------------------------------------------------------------------------------------

const begin = (id: string, token: string | null) =>
  one<CommandRow>(db.pool, "select * from bitrix_sync.begin_command_reconcile($1, $2)", [id, token]);
const resolve = (
  id: string,
  token: string | null,
  outcome: string,
  response: unknown = null,
  code: string | null = null,
) =>
  one<CommandRow>(db.pool, "select * from bitrix_sync.resolve_command_reconcile($1, $2, $3, $4, $5)", [
    id,
    token,
    outcome,
    response === null ? null : JSON.stringify(response),
    code,
  ]);

test("reconcile -> succeeded when the search finds the write applied", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool);
  t.like(await begin(cmd.id, wf.token), { status: "reconcile" });
  const out = await resolve(cmd.id, wf.token, "succeeded", { contact_id: "77" });
  t.like(out, { status: "succeeded", last_error_code: null });
  t.deepEqual(out.response, { contact_id: "77" });
  t.truthy(out.completed_at);
  t.deepEqual(await pathOf(db.pool, "crm_commands", cmd.id), [
    "in_flight",
    "uncertain",
    "reconcile",
    "succeeded",
  ]);
});

test("reconcile -> retry_wait when the search proves the write did not land", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool);
  await begin(cmd.id, wf.token);
  const out = await resolve(cmd.id, wf.token, "retry");
  t.like(out, { status: "retry_wait", last_error_code: "reconciled_not_applied" });
  t.true(out.next_attempt_at.getTime() <= Date.now() + 1000);
});

test("reconcile -> dead_letter writes a technical dead letter", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool);
  await begin(cmd.id, wf.token);
  await rejectsWith(t, resolve(cmd.id, wf.token, "dead_letter", null, "Search failed: HTTP 403"), "BS004");
  const out = await resolve(cmd.id, wf.token, "dead_letter", null, "crm_permission_denied");
  t.like(out, { status: "dead_letter", last_error_code: "crm_permission_denied" });
  t.truthy(out.completed_at);
  const dl = await deadLetters(cmd.id);
  t.is(dl.length, 1);
  t.like(dl[0], { source: "crm_command", error_code: "crm_permission_denied", operation: "contact.add" });
});

test("reconcile is fenced by the workflow lease and follows the edges", async (t) => {
  const { cmd, wf } = await uncertainCommand(db.pool);
  await rejectsWith(t, begin(cmd.id, randomUUID()), "BS001");
  await rejectsWith(t, begin(cmd.id, null), "BS001");
  await rejectsWith(t, resolve(cmd.id, wf.token, "succeeded"), "BS002" /* not begun */);
  await begin(cmd.id, wf.token);
  await rejectsWith(t, resolve(cmd.id, randomUUID(), "succeeded"), "BS001");
  await rejectsWith(t, resolve(cmd.id, wf.token, "maybe"), "BS004");
  // The workflow's lease expired and another worker took it: the old worker is out.
  const next = randomUUID();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, { lease_token: next });
  await rejectsWith(t, resolve(cmd.id, wf.token, "succeeded"), "BS001");
  t.is((await get(cmd.id)).status, "reconcile");
  t.like(await resolve(cmd.id, next, "succeeded"), { status: "succeeded" });

  // Only an uncertain command can enter reconcile (the guard trigger refuses the rest).
  const other = await inFlightCommand(db.pool);
  const token = randomUUID();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", other.wf.id, {
    state: "running",
    lease_token: token,
    locked_until: new Date(Date.now() + 60_000),
  });
  await rejectsWith(t, begin(other.cmd.id, token), "BS002");
});

// ---------------------------------------------------------------------------------------------
// safe codes and the guard
// ---------------------------------------------------------------------------------------------

test("_check_code accepts safe codes and refuses raw text (BS004)", async (t) => {
  for (const ok of ["crm_timeout", "http_503", "contact.not_found", "a"]) {
    await t.notThrowsAsync(db.pool.query("select bitrix_sync._check_code($1)", [ok]), ok);
  }
  for (const bad of [
    null,
    "",
    "Crm_timeout",
    "connection refused",
    "error: +79991234567",
    "x".repeat(65),
    "_leading",
    "a'b",
  ]) {
    const err = await rejectsWith(t, db.pool.query("select bitrix_sync._check_code($1)", [bad]), "BS004");
    t.truthy(err.hint, String(bad));
  }
});

test("a hand-written UPDATE that skips a command edge is refused (BS002)", async (t) => {
  const { cmd } = await inFlightCommand(db.pool, { type: "contact.add" });
  for (const to of ["pending", "leased", "reconcile"]) {
    await rejectsWith(
      t,
      db.pool.query("update bitrix_sync.crm_commands set status = $2 where id = $1", [cmd.id, to]),
      "BS002",
    );
  }
  const pending = await pendingCommand(db.pool, await runningWorkflow(db.pool));
  await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.crm_commands set status = 'in_flight' where id = $1", [pending.id]),
    "BS002",
  );
  await rejectsWith(
    t,
    db.pool.query(
      "update bitrix_sync.crm_commands set status = 'succeeded', completed_at = now() where id = $1",
      [pending.id],
    ),
    "BS002",
  );
});

// ---------------------------------------------------------------------------------------------
// issue 14: the step state with the command, a batch completed at once, retries brought forward

test("issue_command stores the step state in the same write; a state that is not an object is refused", async (t) => {
  const wf = await runningWorkflow(db.pool);
  await rejectsWith(
    t,
    db.pool.query(
      "select bitrix_sync.issue_command($1, $2, 'contact.read', '{}', 'read_contact', null, '[1]')",
      [wf.id, wf.token],
    ),
    "BS004",
  );
  await one(
    db.pool,
    "select * from bitrix_sync.issue_command($1, $2, 'contact.read', '{}', 'read_contact', null, $3)",
    [wf.id, wf.token, JSON.stringify({ pass: 1, contact: 7 })],
  );
  t.like(await workflow(wf.id), {
    state: "waiting_crm",
    current_step: "read_contact",
    step_data: { pass: 1, contact: 7 },
  });
  // Without it the state is kept as it was.
  const other = await runningWorkflow(db.pool);
  await forceRow(db.pool, "bitrix_sync.workflow_instances", other.id, { step_data: { pass: 2 } });
  await pendingCommand(db.pool, other);
  t.deepEqual((await workflow(other.id)).step_data, { pass: 2 });
});

test("complete_commands completes a batch in one call, wakes each workflow, and leaves a stale token alone", async (t) => {
  const a = await inFlightCommand(db.pool, { type: "contact.find_by_phone" });
  const b = await inFlightCommand(db.pool, { type: "contact.add" });
  const stale = await inFlightCommand(db.pool, { type: "contact.find_by_phone" });
  const { rows } = await db.pool.query<{ id: string }>(
    "select c as id from bitrix_sync.complete_commands($1::bigint[], $2::uuid[], $3::jsonb[]) c",
    [
      [a.cmd.id, b.cmd.id, stale.cmd.id],
      [a.token, b.token, randomUUID()],
      [JSON.stringify({ contact_ids: [] }), JSON.stringify({ contact_id: 5 }), "{}"],
    ],
  );
  t.deepEqual(rows.map((r) => String(r.id)).sort(), [String(a.cmd.id), String(b.cmd.id)].sort());
  t.like(await get(a.cmd.id), { status: "succeeded", lease_token: null, response: { contact_ids: [] } });
  t.like(await get(b.cmd.id), { status: "succeeded", response: { contact_id: 5 } });
  t.like(await get(stale.cmd.id), { status: "in_flight", lease_token: stale.token });
  t.is((await workflow(a.wf.id)).state, "running");
  t.is((await workflow(b.wf.id)).state, "running");
  t.is((await workflow(stale.wf.id)).state, "waiting_crm");
  t.deepEqual(await pathOf(db.pool, "crm_commands", a.cmd.id), ["in_flight", "succeeded"]);
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_commands($1::bigint[], $2::uuid[], $3::jsonb[])", [
      [a.cmd.id],
      [],
      ["{}"],
    ]),
    "BS004",
  );
});

// Serial: it runs before the concurrent tests, so the counts of the test above see none of its rows.
test.serial("bring_forward_commands cuts a late-write wait to its settling, never below", async (t) => {
  const code = `portal_down_${randomUUID().slice(0, 8)}`;
  const lateWrite = async (settles: Date | string | null) => {
    const { wf } = await inFlightCommand(db.pool, { type: "contact.find_by_phone" });
    await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
      state: "waiting_retry",
      lease_token: null,
      locked_by: null,
      locked_until: null,
      last_error_code: "awaiting_late_write",
      next_attempt_at: new Date(Date.now() + 30 * 60_000),
      step_data: JSON.stringify({
        pass: 1,
        ...(settles === null
          ? {}
          : { late_write_settles_at: settles instanceof Date ? settles.toISOString() : settles }),
      }),
    });
    return wf.id;
  };
  const soon = new Date(Date.now() + 20_000);
  const future = await lateWrite(soon);
  const past = await lateWrite(new Date(Date.now() - 60_000));
  const beyond = await lateWrite(new Date(Date.now() + 60 * 60_000));
  const unknown = await lateWrite(null);
  const garbled = await lateWrite("tomorrow");
  const at = async (id: string) =>
    (
      await one<{ at: Date }>(
        db.pool,
        "select next_attempt_at as at from bitrix_sync.workflow_instances where id = $1",
        [id],
      )
    ).at.getTime();
  const probe = await one<{ n: number }>(db.pool, "select bitrix_sync.bring_forward_commands($1, 1) as n", [
    [code],
  ]);
  t.is(probe.n, 0, "a probe moves no workflow");
  const before = Date.now();
  const all = await one<{ n: number }>(db.pool, "select bitrix_sync.bring_forward_commands($1, null) as n", [
    [code],
  ]);
  t.is(all.n, 2);
  t.is(await at(future), soon.getTime(), "due when its late write settles, not before");
  t.true((await at(past)) <= Date.now() && (await at(past)) >= before - 1000, "settled already: due now");
  t.true((await at(beyond)) > Date.now() + 25 * 60_000, "a wait shorter than the settling keeps its time");
  t.true(
    (await at(unknown)) > Date.now() + 25 * 60_000,
    "a wait that does not say when it settles keeps its time",
  );
  t.true((await at(garbled)) > Date.now() + 25 * 60_000, "and so does one whose moment is not a timestamp");
  t.is(
    (await one<{ n: number }>(db.pool, "select bitrix_sync.bring_forward_commands($1, null) as n", [[code]]))
      .n,
    0,
  );
});

test("bring_forward_commands makes retries of portal-wide failures due: one as a probe, then all", async (t) => {
  // A code of this test's own, so concurrent tests' retries are never touched.
  const code = `portal_down_${randomUUID().slice(0, 8)}`;
  const waiting = async (minutes: number, errorCode: string) => {
    const { cmd } = await inFlightCommand(db.pool, { type: "contact.find_by_phone" });
    await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, {
      status: "retry_wait",
      lease_token: null,
      locked_by: null,
      locked_until: null,
      last_error_code: errorCode,
      next_attempt_at: new Date(Date.now() + minutes * 60_000),
    });
    return cmd.id;
  };
  const later = await waiting(30, code);
  const sooner = await waiting(10, code);
  const other = await waiting(5, "invalid_argument");
  // Workflows waiting in waiting_retry: one whose command was handed back with the portal-wide code,
  // one waiting for a late write that may still land.
  const waitingWorkflow = async (errorCode: string) => {
    const { wf } = await inFlightCommand(db.pool, { type: "contact.find_by_phone" });
    await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
      state: "waiting_retry",
      lease_token: null,
      locked_by: null,
      locked_until: null,
      last_error_code: errorCode,
      next_attempt_at: new Date(Date.now() + 30 * 60_000),
    });
    return wf.id;
  };
  const handedBack = await waitingWorkflow(code);
  const lateWrite = await waitingWorkflow("awaiting_late_write");
  const workflowDue = async (id: string) =>
    (
      await one<{ at: Date }>(
        db.pool,
        "select next_attempt_at as at from bitrix_sync.workflow_instances where id = $1",
        [id],
      )
    ).at.getTime() <=
    Date.now() + 1000;
  const bring = (limit: number | null) =>
    one<{ n: number }>(db.pool, "select bitrix_sync.bring_forward_commands($1, $2) as n", [[code], limit]);

  t.is((await bring(1)).n, 1, "a probe brings one forward");
  t.true((await get(sooner)).next_attempt_at.getTime() <= Date.now() + 1000, "the earliest one");
  t.true((await get(later)).next_attempt_at.getTime() > Date.now() + 60_000);
  t.false(await workflowDue(handedBack), "a probe is one command, never a workflow");
  t.is((await bring(null)).n, 2, "then every other command and workflow of those codes");
  t.true((await get(later)).next_attempt_at.getTime() <= Date.now() + 1000);
  t.true(await workflowDue(handedBack), "the handed-back workflow is due");
  t.false(await workflowDue(lateWrite), "a wait for a late write keeps its time");
  t.is((await get(later)).status, "retry_wait", "due, claimed like any due command");
  t.true(
    (await get(other)).next_attempt_at.getTime() > Date.now() + 60_000,
    "other failures keep their backoff",
  );
  t.is((await bring(null)).n, 0);
  await rejectsWith(t, bring(0), "BS004");
});
