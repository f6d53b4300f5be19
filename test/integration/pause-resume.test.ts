// Pause and resume (§17 rollback, issue 32; sql/pause/gate.sql, sql/status/pause.sql): an admin's pause stops every claim
// function at once while the receivers and the App's journal keep recording; resume_preview shows
// what waits, uncertain writes first; resume_sync confirms the pause by its id, returns the same
// summary and releases the work; both are audited and refused to the runtime. And the reason the
// pause is recorded at all: a pause longer than the retry horizon resumes with no dead letter, where
// the same history without the pause dead-letters every kind of row (intents, webhooks, commands,
// workflows).
import { randomUUID } from "node:crypto";
import test, { type ExecutionContext } from "ava";
import type pg from "pg";
import { inFlightCommand, runningWorkflow, uncertainCommand } from "../helpers/builders.js";
import { claimCommands, claimSyncTasks, claimWebhooks, claimWorkflows } from "../helpers/claims.js";
import { queryAsRole } from "../helpers/dead-letters.js";
import { makeUser } from "../helpers/factories.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

const ADMIN = "bitrix_sync_admin";
const RUNTIME = "bitrix_sync_user";

interface PreviewRow {
  section: string;
  item: string;
  count: string;
  oldest_age_sec: string | null;
  note: string | null;
}

const pause = (pool: pg.Pool, operator = "ops:test", reason = "portal maintenance window") =>
  queryAsRole<{ pause_id: string; drained: boolean; paused_by: string }>(
    pool,
    ADMIN,
    "select * from bitrix_sync.pause_sync($1, $2)",
    [operator, reason],
  );
const preview = (pool: pg.Pool) =>
  queryAsRole<PreviewRow>(pool, ADMIN, "select * from bitrix_sync.resume_preview()");
const resume = (pool: pg.Pool, id: string, operator = "ops:test", reason = "portal is back") =>
  queryAsRole<PreviewRow>(pool, ADMIN, "select * from bitrix_sync.resume_sync($1, $2, $3)", [
    operator,
    id,
    reason,
  ]);
const deadLetters = async (pool: pg.Pool) =>
  Number((await one<{ n: string }>(pool, "select count(*) as n from bitrix_sync.technical_dead_letters")).n);

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test.serial(
  "while paused no claim function returns work; the receivers and the journal record; resume releases it",
  async (t) => {
    // Due work of every lane.
    const user = await makeUser(db.pool);
    await db.pool.query("select bitrix_sync.record_webhook('contact', 3, '4711', '127.0.0.1')");
    const wf = await runningWorkflow(db.pool);
    await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
      state: "waiting_retry",
      lease_token: null,
      locked_by: null,
      locked_until: null,
      next_attempt_at: new Date(Date.now() - 1000),
    });
    await db.pool.query(
      `select bitrix_sync.issue_alert_command(a.id, 'alert.add', '{}')
         from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('c', 64), null) a`,
    );

    const [p] = await pause(db.pool);
    t.truthy(p);
    t.is(p?.paused_by, "ops:test");
    t.true(p?.drained, "nothing was claimed before the pause");

    const gated = async () => ({
      intents: (await claimSyncTasks(db.pool, "t")).length,
      workflows: (await claimWorkflows(db.pool, "t")).length,
      commands: (await claimCommands(db.pool, "t")).length,
      due: (await one<{ due: number }>(db.pool, "select due from bitrix_sync.due_commands()")).due,
      webhooks: (await claimWebhooks(db.pool, "t")).length,
      reconciliation: (
        await db.pool.query(
          "select * from bitrix_sync.claim_reconciliation_cursor('contacts', interval '0', true)",
        )
      ).rows.length,
      audit: (await db.pool.query("select * from bitrix_sync.claim_audit_run(false, true)")).rows.length,
    });
    t.deepEqual(await gated(), {
      intents: 0,
      workflows: 0,
      commands: 0,
      due: 0,
      webhooks: 0,
      reconciliation: 0,
      audit: 0,
    });
    // The receivers and the App keep recording while paused.
    await db.pool.query("select bitrix_sync.record_webhook('contact', 3, '4712', '127.0.0.1')");
    const later = await makeUser(db.pool, { fold: false });
    const journal = await one<{ n: string }>(
      db.pool,
      "select count(*) as n from han_app.sync_queue_journal where user_id = $1",
      [later.id],
    );
    t.true(Number(journal.n) > 0, "the App's intent waits in the journal");
    const status = await one<{ pause_id: string; pause_reason: string; drained: boolean }>(
      db.pool,
      "select * from bitrix_sync.status_pause",
    );
    t.is(status.pause_id, p?.pause_id as string);
    t.is(status.pause_reason, "portal maintenance window");

    // A second pause is refused; the runtime can neither pause nor resume.
    await rejectsWith(t, pause(db.pool), "BS070");
    await rejectsWith(
      t,
      queryAsRole(db.pool, RUNTIME, "select * from bitrix_sync.pause_sync('svc', 'not mine to do')"),
      "42501",
    );
    await rejectsWith(
      t,
      queryAsRole(db.pool, RUNTIME, "select * from bitrix_sync.resume_sync('svc', $1, 'not mine')", [
        p?.pause_id,
      ]),
      "42501",
    );
    // Resume confirms the open pause by its id, with an operator and a reason.
    await rejectsWith(t, resume(db.pool, String(Number(p?.pause_id) + 1)), "BS072");
    await rejectsWith(t, resume(db.pool, p?.pause_id as string, "ops:test", ""), "BS004");

    const rows = await resume(db.pool, p?.pause_id as string);
    t.is(rows[0]?.section, "pause");
    t.is(rows[0]?.item, `pause ${p?.pause_id}`);
    t.is(rows[1]?.section, "uncertain_commands", "uncertain writes come right after the pause");
    await rejectsWith(t, resume(db.pool, p?.pause_id as string), "BS071");

    const after = await gated();
    t.true(after.intents >= 1, "the intents are claimed again");
    t.true(after.workflows >= 1);
    t.true(after.commands >= 1);
    t.true(after.webhooks >= 1);
    t.is(after.reconciliation, 1);
    t.is(after.audit, 1);
    t.truthy(user.id);

    // Both are audited, with who and why, and the pause row keeps both ends.
    const audit = await queryAsRole<{ action: string; operator_id: string; reason: string }>(
      db.pool,
      ADMIN,
      "select action, operator_id, reason from bitrix_sync.admin_actions where action in ('pause_sync', 'resume_sync') order by id",
    );
    t.deepEqual(audit, [
      { action: "pause_sync", operator_id: "ops:test", reason: "portal maintenance window" },
      { action: "resume_sync", operator_id: "ops:test", reason: "portal is back" },
    ]);
    const row = await one<{ resumed_by: string; resumed_db_user: string; resumed_at: Date; paused_at: Date }>(
      db.pool,
      "select * from bitrix_sync.sync_pauses where id = $1",
      [p?.pause_id],
    );
    t.is(row.resumed_by, "ops:test");
    t.truthy(row.resumed_db_user);
    t.true(row.resumed_at >= row.paused_at);
    // The record is history: it cannot be moved or deleted.
    await rejectsWith(
      t,
      db.pool.query("update bitrix_sync.sync_pauses set paused_at = now() - interval '1 day'"),
      "BS031",
    );
    await rejectsWith(
      t,
      db.pool.query("update bitrix_sync.sync_pauses set resumed_by = 'someone else'"),
      "BS031",
    );
    await rejectsWith(t, db.pool.query("delete from bitrix_sync.sync_pauses"), "BS003");
  },
);

test.serial(
  "resume_preview lists the uncertain writes first, then what waits, and changes nothing",
  async (t) => {
    const { cmd } = await uncertainCommand(db.pool);
    await makeUser(db.pool);
    const [p] = await pause(db.pool);
    const before = await one<{ n: string }>(db.pool, "select count(*) as n from bitrix_sync.admin_actions");
    const rows = await preview(db.pool);
    const sections = [...new Set(rows.map((r) => r.section))];
    t.deepEqual(sections.slice(0, 3), ["pause", "uncertain_commands", "in_hand"]);
    const unsure = rows.filter((r) => r.section === "uncertain_commands");
    t.true(unsure.some((r) => r.item === "contact.add uncertain" && Number(r.count) >= 1));
    t.regex(unsure[0]?.note ?? "", /Look at these first/);
    t.true(rows.some((r) => r.section === "workflows"));
    t.true(rows.some((r) => r.section === "queue" && r.item === "pending"));
    t.true(rows.some((r) => r.section === "dead_letters"));
    t.is(
      (await one<{ n: string }>(db.pool, "select count(*) as n from bitrix_sync.admin_actions")).n,
      before.n,
      "the preview records nothing",
    );
    t.is(
      (
        await one<{ status: string }>(db.pool, "select status from bitrix_sync.crm_commands where id = $1", [
          cmd.id,
        ])
      ).status,
      "uncertain",
    );
    // resume_sync answers with the same rows as they stood.
    const returned = await resume(db.pool, p?.pause_id as string);
    t.deepEqual(
      returned.filter((r) => r.section !== "pause").map((r) => [r.section, r.item, r.count]),
      rows.filter((r) => r.section !== "pause").map((r) => [r.section, r.item, r.count]),
    );
  },
);

/** Lets every lease the earlier tests left run out, as a crash would (their holders are gone). */
async function expireLeases(pool: pg.Pool) {
  await pool.query(
    "update han_app.sync_queue set locked_until = now() - interval '1 second' where status = 'leased'",
  );
  await pool.query(
    "update bitrix_sync.workflow_instances set locked_until = now() - interval '1 second' where state = 'running'",
  );
  await pool.query(
    "update bitrix_sync.crm_commands set locked_until = now() - interval '1 second' where status in ('leased', 'in_flight')",
  );
  await pool.query(
    "update bitrix_sync.webhook_inbox set locked_until = now() - interval '1 second' where status = 'processing'",
  );
}

interface InHand {
  intents_leased: string;
  workflows_running: string;
  commands_in_hand: string;
  webhooks_processing: string;
  requests_out: string;
  drained: boolean;
}

test.serial("status_pause counts the work claimed before the pause until it has finished", async (t) => {
  await expireLeases(db.pool);
  // A batch in flight (its workflow waits for the CRM, holding no lease).
  const held = await inFlightCommand(db.pool);
  const [p] = await pause(db.pool);
  t.false(p?.drained);
  const inHand = () =>
    one<InHand>(
      db.pool,
      "select intents_leased, workflows_running, commands_in_hand, webhooks_processing, requests_out, drained from bitrix_sync.status_pause",
    );
  t.deepEqual(await inHand(), {
    intents_leased: "0",
    workflows_running: "0",
    commands_in_hand: "1",
    webhooks_processing: "0",
    requests_out: "0",
    drained: false,
  });
  // The reply comes in: completions are not gated.
  await db.pool.query("select bitrix_sync.complete_command($1, $2, '{}')", [held.cmd.id, held.token]);
  t.like(await inHand(), { commands_in_hand: "0", drained: true });
  await resume(db.pool, p?.pause_id as string);
});

/**
 * One row of each kind whose first attempt was 25 hours ago (past the 24 h horizon), held under a
 * lease, fails once more: each retry function decides between a retry and a dead letter.
 */
async function failOnceMoreAfter25Hours(pool: pg.Pool) {
  const ago = new Date(Date.now() - 25 * 3600_000);
  const user = await makeUser(pool);
  const q = await one<{ id: string }>(
    pool,
    "select id from han_app.sync_queue where entity_id = $1 and status = 'pending'",
    [user.id],
  );
  const qToken = randomUUID();
  await forceRow(pool, "han_app.sync_queue", q.id, {
    status: "leased",
    lease_token: qToken,
    locked_by: "intake",
    locked_until: new Date(Date.now() + 60_000),
    created_at: ago,
  });
  const { id: inboxId } = await one<{ id: string }>(
    pool,
    "select bitrix_sync.record_webhook('contact', 3, '4800', '127.0.0.1') as id",
  );
  const wToken = randomUUID();
  await forceRow(pool, "bitrix_sync.webhook_inbox", inboxId, {
    status: "processing",
    lease_token: wToken,
    locked_by: "webhooks",
    locked_until: new Date(Date.now() + 60_000),
    received_at: ago,
  });
  const held = await inFlightCommand(pool);
  await forceRow(pool, "bitrix_sync.crm_commands", held.cmd.id, { first_sent_at: ago, created_at: ago });
  const wf = await runningWorkflow(pool);
  await forceRow(pool, "bitrix_sync.workflow_instances", wf.id, { created_at: ago });

  const intent = await one<{ status: string }>(
    pool,
    "select status from bitrix_sync.retry_sync_task($1, $2, 'crm_timeout', interval '1 second')",
    [q.id, qToken],
  );
  const webhook = await one<{ status: string }>(
    pool,
    "select status from bitrix_sync.retry_webhook($1, $2, 'crm_timeout', interval '1 second')",
    [inboxId, wToken],
  );
  const command = await one<{ status: string }>(
    pool,
    "select status from bitrix_sync.retry_command($1, $2, 'crm_timeout', interval '1 second')",
    [held.cmd.id, held.token],
  );
  const workflow = await one<{ state: string }>(
    pool,
    "select state from bitrix_sync.schedule_workflow_retry($1, $2, 'crm_timeout', interval '1 second')",
    [wf.id, wf.token],
  );
  return {
    intent: intent.status,
    webhook: webhook.status,
    command: command.status,
    workflow: workflow.state,
  };
}

const horizon = test.macro(async (t: ExecutionContext, paused: boolean) => {
  // A database of its own: a pause is history every later row is judged by.
  const own = await createTestDb();
  t.teardown(() => own.drop());
  if (paused) {
    // A pause of 24.5 hours that ended half an hour ago, recorded through the admin's functions;
    // only its start is moved back (the row guards are off for that one write).
    const [p] = await pause(own.pool, "ops:test", "portal migration weekend");
    await forceRow(own.pool, "bitrix_sync.sync_pauses", p?.pause_id as string, {
      paused_at: new Date(Date.now() - 24.5 * 3600_000),
    });
    await resume(own.pool, p?.pause_id as string);
    await forceRow(own.pool, "bitrix_sync.sync_pauses", p?.pause_id as string, {
      resumed_at: new Date(Date.now() - 0.5 * 3600_000),
    });
  }
  const outcome = await failOnceMoreAfter25Hours(own.pool);
  if (paused) {
    t.deepEqual(outcome, {
      intent: "retry_wait",
      webhook: "retry_wait",
      command: "retry_wait",
      workflow: "waiting_retry",
    });
    t.is(await deadLetters(own.pool), 0, "no dead letter after a pause longer than the horizon");
    // The stored deadline the retry wrote counts the pause: 25 h ago + 24 h + 24 h paused.
    const { deadline_at } = await one<{ deadline_at: Date }>(
      own.pool,
      "select deadline_at from bitrix_sync.crm_commands where status = 'retry_wait'",
    );
    const hoursAhead = (deadline_at.getTime() - Date.now()) / 3600_000;
    t.true(hoursAhead > 22.9 && hoursAhead < 23.1, `deadline ${hoursAhead.toFixed(2)} h ahead`);
  } else {
    t.deepEqual(outcome, {
      intent: "dead_letter",
      webhook: "dead_letter",
      command: "dead_letter",
      workflow: "failed",
    });
    t.is(await deadLetters(own.pool), 4);
  }
});

test("a pause longer than the retry horizon resumes with no dead letter", horizon, true);
test("the same history without the pause dead-letters every kind of row (control)", horizon, false);

test("an open pause holds every row's horizon while it lasts", async (t) => {
  const own = await createTestDb();
  t.teardown(() => own.drop());
  // Paused 23.5 h ago and still paused: a row first tried 25 h ago has spent 1.5 h of its horizon.
  const [p] = await pause(own.pool);
  await forceRow(own.pool, "bitrix_sync.sync_pauses", p?.pause_id as string, {
    paused_at: new Date(Date.now() - 23.5 * 3600_000),
  });
  const { deadline } = await one<{ deadline: Date }>(
    own.pool,
    "select bitrix_sync._retry_deadline(now() - interval '25 hours') as deadline",
  );
  const hoursAhead = (deadline.getTime() - Date.now()) / 3600_000;
  t.true(hoursAhead > 22.4 && hoursAhead < 22.6, `deadline ${hoursAhead.toFixed(2)} h ahead`);
  // A first attempt during the pause has spent nothing yet.
  const { sec } = await one<{ sec: number }>(
    own.pool,
    "select extract(epoch from bitrix_sync._retry_deadline(now() - interval '1 hour') - now())::int as sec",
  );
  t.is(sec, 24 * 3600);
});
