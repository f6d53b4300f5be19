// Technical dead letters an admin can act on (§9, issue 11; sql/dead_letters.sql): list, acknowledge
// and requeue as bitrix_sync_admin, audited on the entry, refused for the runtime and the App, with
// SQLSTATE + HINT errors; a requeue is a new attempt through the normal state machine with a retry
// horizon of its own, and the open-DLQ gauge counts unacknowledged entries only.
import { randomUUID } from "node:crypto";
import test from "ava";
import { collectScrape } from "../../src/http/scrape.js";
import { registry } from "../../src/observability/metrics.js";
import {
  alertWithDeadUpdate,
  type DeadLetterRow,
  deadLetteredIntent,
  deadLetteredWebhook,
  queryAsRole,
  workflowFailedByCommand,
} from "../helpers/dead-letters.js";
import { makeUser } from "../helpers/factories.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const ADMIN = "bitrix_sync_admin";
const ack = (id: string, operator = "ops:test", reason = "looked at it, nothing to resend") =>
  queryAsRole(db.pool, ADMIN, "select * from bitrix_sync.acknowledge_dead_letter($1, $2, $3)", [
    id,
    operator,
    reason,
  ]);
const requeue = (id: string, reason = "portal rights fixed, OPS-42") =>
  queryAsRole<{ dead_letter_id: string; requeued_to: string; resolution: string }>(
    db.pool,
    ADMIN,
    "select * from bitrix_sync.requeue_dead_letter($1, 'ops:test', $2)",
    [id, reason],
  );
const listed = async (id: string) =>
  (
    await queryAsRole<{ id: string; requeue: string | null; workflow_state: string | null }>(
      db.pool,
      ADMIN,
      "select * from bitrix_sync.list_dead_letters(true, 10000)",
    )
  ).find((r) => r.id === id);
const deadLetter = (id: string) =>
  one<DeadLetterRow>(db.pool, "select * from bitrix_sync.technical_dead_letters where id = $1", [id]);

test("the admin lists open dead letters with safe columns and what a requeue would do", async (t) => {
  const { dl } = await deadLetteredIntent(db.pool);
  const rows = await queryAsRole<Record<string, unknown>>(
    db.pool,
    ADMIN,
    "select * from bitrix_sync.list_dead_letters()",
  );
  const row = rows.find((r) => r.id === dl.id);
  t.like(row, {
    source: "sync_queue",
    operation: "contact.map_or_create",
    error_code: "intake_failed",
    requeue: "ready",
  });
  t.deepEqual(
    Object.keys(row ?? {}).sort(),
    [
      "age_sec",
      "attempt_count",
      "bitrix_error",
      "command_id",
      "created_at",
      "deadline_at",
      "error_code",
      "first_attempt_at",
      "http_status",
      "id",
      "operation",
      "requeue",
      "requeued_to",
      "resolution",
      "resolved_at",
      "resolved_by",
      "resolved_db_user",
      "source",
      "source_id",
      "workflow_id",
      "workflow_state",
      "workflow_type",
    ],
    "codes, counts, times, internal ids and who resolved it only: no user id, Contact id, reason or raw text",
  );
  await rejectsWith(
    t,
    queryAsRole(db.pool, ADMIN, "select * from bitrix_sync.list_dead_letters(false, 0)"),
    "BS004",
  );
});

test.serial(
  "acknowledge records who, when and why; the entry leaves the status view and the open-DLQ gauge",
  async (t) => {
    const { dl } = await workflowFailedByCommand(db.pool);
    const gauge = async () => {
      await collectScrape({ pool: db.pool });
      const m = (await registry.getSingleMetric("bitrix_sync_dead_letters_open")?.get())?.values ?? [];
      return m
        .filter(
          (v) => v.labels.operation === "contact.find_by_phone" && v.labels.code === "permission_denied",
        )
        .reduce((n, v) => n + v.value, 0);
    };
    const before = await gauge();
    t.true(before >= 1);
    const [r] = await ack(dl.id, " ops:ivanov ", "  wrong portal scope, fixed in OPS-7  ");
    t.like(r, {
      dead_letter_id: dl.id,
      resolution: "acknowledged",
      requeued_to: null,
      resolved_by: "ops:ivanov",
    });
    t.like(await deadLetter(dl.id), {
      resolution: "acknowledged",
      resolved_by: "ops:ivanov",
      resolution_reason: "wrong portal scope, fixed in OPS-7",
    });
    t.truthy((await deadLetter(dl.id)).resolved_at);
    t.like(
      await one(
        db.pool,
        "select action, workflow_id, reason, operator_id, db_user from bitrix_sync.admin_actions where dead_letter_id = $1",
        [dl.id],
      ),
      {
        action: "acknowledge_dead_letter",
        reason: "wrong portal scope, fixed in OPS-7",
        operator_id: "ops:ivanov",
      },
      "audited with the admin functions' others",
    );
    t.is(await gauge(), before - 1, "the gauge counts unacknowledged entries only");
    t.is((await listed(dl.id))?.requeue, null, "a resolved entry offers no requeue");

    const again = await rejectsWith(t, ack(dl.id), "BS041");
    t.regex(again.message, /already acknowledged by ops:ivanov/);
    t.truthy(again.hint);
    await rejectsWith(t, requeue(dl.id), "BS041");
  },
);

test("admin functions refuse bad audit fields and unknown ids with a hint", async (t) => {
  const { dl } = await deadLetteredWebhook(db.pool);
  for (const [operator, reason] of [
    ["", "a good reason"],
    [null, "a good reason"],
    ["ops:test", "no"],
    ["ops:test", null],
    ["ops:test", "x".repeat(501)],
  ] as const) {
    const e = await rejectsWith(
      t,
      queryAsRole(db.pool, ADMIN, "select * from bitrix_sync.acknowledge_dead_letter($1, $2, $3)", [
        dl.id,
        operator,
        reason,
      ]),
      "BS004",
      `${operator}/${reason}`,
    );
    t.truthy(e.hint);
  }
  const missing = await rejectsWith(t, ack("999999999"), "BS040");
  t.regex(missing.hint ?? "", /list_dead_letters/);
  await rejectsWith(t, requeue("999999999"), "BS040");
  t.is((await deadLetter(dl.id)).resolved_at, null, "nothing was resolved by the refusals");
});

test("the runtime and the App roles cannot list, acknowledge or requeue", async (t) => {
  const { dl } = await deadLetteredWebhook(db.pool);
  for (const role of ["bitrix_sync_user", "han_app_user"]) {
    for (const sql of [
      "select * from bitrix_sync.list_dead_letters()",
      `select * from bitrix_sync.acknowledge_dead_letter(${dl.id}, 'ops:x', 'a reason here')`,
      `select * from bitrix_sync.requeue_dead_letter(${dl.id}, 'ops:x', 'a reason here')`,
    ]) {
      await rejectsWith(t, queryAsRole(db.pool, role, sql), "42501", `${role}: ${sql}`);
    }
  }
  t.is((await deadLetter(dl.id)).resolved_at, null);
});

test("requeue of an intent: a new pending row of the same task, user and payload, with a fresh horizon", async (t) => {
  const { user, queueId, dl } = await deadLetteredIntent(db.pool);
  const old = await one<{ payload_json: unknown; dedup_key: string; created_at: Date }>(
    db.pool,
    "select payload_json, dedup_key, created_at from han_app.sync_queue where id = $1",
    [queueId],
  );
  const [r] = await requeue(dl.id);
  t.regex(r?.requeued_to ?? "", /^sync_queue:[0-9a-f-]{36}$/);
  const newId = (r?.requeued_to ?? "").slice("sync_queue:".length);
  const row = await one<{
    status: string;
    entity_id: string;
    dedup_key: string;
    payload_json: unknown;
    created_at: Date;
    attempt_count: number;
  }>(db.pool, "select * from han_app.sync_queue where id = $1", [newId]);
  t.like(row, { status: "pending", entity_id: user.id, dedup_key: old.dedup_key, attempt_count: 0 });
  t.deepEqual(row.payload_json, old.payload_json);
  t.true(row.created_at > old.created_at, "its horizon counts from the requeue");
  t.is(
    (await one<{ status: string }>(db.pool, "select status from han_app.sync_queue where id = $1", [queueId]))
      .status,
    "dead_letter",
    "the dead row stays as history",
  );
  t.like(await deadLetter(dl.id), {
    resolution: "requeued",
    requeued_to: r?.requeued_to,
    resolved_by: "ops:test",
  });
  t.like(
    await one(
      db.pool,
      "select action, operator_id from bitrix_sync.admin_actions where dead_letter_id = $1",
      [dl.id],
    ),
    { action: "requeue_dead_letter", operator_id: "ops:test" },
  );

  // A second dead intent of the same kind while the requeued one is still queued: nothing to add.
  const second = await deadLetteredIntent(db.pool);
  await db.pool.query(
    "insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key) values ('contact.map_or_create', 'user', $1, $2)",
    [second.user.id, `contact.map_or_create:user:${second.user.id}`],
  );
  const e = await rejectsWith(t, requeue(second.dl.id), "BS042");
  t.regex(e.message, /newer intent/);
  t.regex(e.hint ?? "", new RegExp(`acknowledge_dead_letter\\(${second.dl.id},`));
  t.regex((await listed(second.dl.id))?.requeue ?? "", /^BS042: /);
});

test("requeue of a webhook: a new inbox event for the same Contact, marked as a requeue", async (t) => {
  const { contactId, dl } = await deadLetteredWebhook(db.pool);
  const [r] = await requeue(dl.id);
  const id = (r?.requeued_to ?? "").replace(/^webhook:/, "");
  t.like(
    await one(
      db.pool,
      "select receiver, entity_id, status, event_type, source_ip from bitrix_sync.webhook_inbox where id = $1",
      [id],
    ),
    { receiver: "contact", entity_id: contactId, status: "received", event_type: "requeue", source_ip: null },
  );
});

test("requeue of a workflow's command restarts the failed workflow from its first step with a new horizon", async (t) => {
  // Still running (the step has not read the outcome yet): its own handling comes first.
  const running = await workflowFailedByCommand(db.pool, { fail: false });
  const busy = await rejectsWith(t, requeue(running.dl.id), "BS043");
  t.regex(busy.message, /still running/);
  t.truthy(busy.hint);

  const { workflowId, dl } = await workflowFailedByCommand(db.pool);
  t.is((await listed(dl.id))?.requeue, "ready");
  const [r] = await requeue(dl.id);
  t.is(r?.requeued_to, `workflow:${workflowId}`);
  const wf = await one<Record<string, unknown>>(
    db.pool,
    "select * from bitrix_sync.workflow_instances where id = $1",
    [workflowId],
  );
  t.like(wf, {
    state: "waiting_retry",
    current_step: "start",
    step_data: {},
    outcome: null,
    finished_at: null,
    attempt_count: 0,
    lease_token: null,
  });
  t.truthy(wf.requeued_at);
  t.true((wf.next_attempt_at as Date).getTime() <= Date.now() + 1000, "due now");
  t.true((wf.deadline_at as Date).getTime() > Date.now() + 3_600_000, "a horizon counted from the requeue");
});

test("a requeued workflow's retry horizon counts from the requeue, not from its creation", async (t) => {
  const { workflowId, dl } = await workflowFailedByCommand(db.pool);
  // Created long ago: past the horizon by its creation, inside it by its requeue.
  await db.pool.query(
    "update bitrix_sync.workflow_instances set created_at = now() - interval '3 days' where id = $1",
    [workflowId],
  );
  await requeue(dl.id);
  const token = randomUUID();
  await db.pool.query(
    "update bitrix_sync.workflow_instances set state = 'running', lease_token = $2, locked_by = 'w', locked_until = now() + interval '1 minute' where id = $1",
    [workflowId, token],
  );
  const { state } = await one<{ state: string }>(
    db.pool,
    "select state from bitrix_sync.schedule_workflow_retry($1, $2, 'step_failed', interval '1 second')",
    [workflowId, token],
  );
  t.is(state, "waiting_retry");
});

test("requeue refuses a workflow superseded by a newer one of the same user", async (t) => {
  const { workflowId, dl } = await workflowFailedByCommand(db.pool);
  const { user_id } = await one<{ user_id: string }>(
    db.pool,
    "select user_id from bitrix_sync.workflow_instances where id = $1",
    [workflowId],
  );
  const newer = await one<{ workflow_id: string }>(
    db.pool,
    "select workflow_id from bitrix_sync.start_or_join_workflow($1, 'contact.update', gen_random_uuid(), null)",
    [user_id],
  );
  const running = await rejectsWith(t, requeue(dl.id), "BS043");
  t.regex(running.message, /newer workflow/);
  await db.pool.query(`select bitrix_sync.fire_workflow_event($1, null, 'cancel', '{}')`, [
    newer.workflow_id,
  ]);
  const finished = await rejectsWith(t, requeue(dl.id), "BS042");
  t.regex(finished.message, /newer workflow/);
  t.is(
    (
      await one<{ state: string }>(
        db.pool,
        "select state from bitrix_sync.workflow_instances where id = $1",
        [workflowId],
      )
    ).state,
    "failed",
  );
});

test("one requeue answers every open dead letter of the same workflow", async (t) => {
  const { workflowId, commandId, dl } = await workflowFailedByCommand(db.pool);
  await db.pool.query(
    `insert into bitrix_sync.technical_dead_letters (source, source_id, workflow_id, operation, error_code)
     values ('workflow', $1, $2, 'contact.map_or_create', 'retry_horizon_exceeded')`,
    [workflowId, workflowId],
  );
  const rows = await requeue(dl.id);
  t.is(rows.length, 2);
  t.true(rows.every((r) => r.resolution === "requeued" && r.requeued_to === `workflow:${workflowId}`));
  t.truthy(commandId);
});

test("requeue of an alert's command mirrors the alert again; the dead update stays as history", async (t) => {
  const { alertId, commandId, dl } = await alertWithDeadUpdate(db.pool);
  t.is(
    (
      await one<{ crm_sync_status: string }>(
        db.pool,
        "select crm_sync_status from bitrix_sync.business_alerts where id = $1",
        [alertId],
      )
    ).crm_sync_status,
    "failed",
  );
  const [r] = await requeue(dl.id);
  t.is(r?.requeued_to, `alert:${alertId}`);
  t.is(
    (
      await one<{ crm_sync_status: string }>(
        db.pool,
        "select crm_sync_status from bitrix_sync.business_alerts where id = $1",
        [alertId],
      )
    ).crm_sync_status,
    "pending",
  );
  t.is(
    (
      await one<{ status: string }>(db.pool, "select status from bitrix_sync.crm_commands where id = $1", [
        commandId,
      ])
    ).status,
    "dead_letter",
  );
});

test("a failed rebind is asked again, not requeued; one still in progress restarts", async (t) => {
  const failedRebind = async (requestStatus: string) => {
    const u = await makeUser(db.pool);
    const { id: requestId } = await one<{ id: string }>(
      db.pool,
      "select bitrix_sync.request_bitrix_contact_rebind($1, '4242', 'duplicate merged by the CRM team', 'ops:test') as id",
      [u.id],
    );
    const { workflow_id } = await one<{ workflow_id: string }>(
      db.pool,
      "select workflow_id from bitrix_sync.rebind_requests where id = $1",
      [requestId],
    );
    await forceRow(db.pool, "bitrix_sync.rebind_requests", requestId, { status: requestStatus });
    await forceRow(db.pool, "bitrix_sync.workflow_instances", workflow_id, {
      state: "failed",
      finished_at: new Date(),
    });
    const dl = await one<{ id: string }>(
      db.pool,
      `insert into bitrix_sync.technical_dead_letters (source, source_id, workflow_id, operation, error_code)
       values ('workflow', $1, $2, 'contact.rebind', 'retry_horizon_exceeded') returning id`,
      [workflow_id, workflow_id],
    );
    return { workflowId: workflow_id, dl };
  };
  const finished = await failedRebind("failed");
  const e = await rejectsWith(t, requeue(finished.dl.id), "BS042");
  t.regex(e.message, /rebind request is finished/);
  t.regex(e.hint ?? "", /request_bitrix_contact_rebind/);

  const open = await failedRebind("in_progress");
  const [r] = await requeue(open.dl.id);
  t.is(r?.requeued_to, `workflow:${open.workflowId}`);
});

test("the cutover is the admin's: the runtime and the App roles cannot run it", async (t) => {
  for (const role of ["bitrix_sync_user", "han_app_user"]) {
    await rejectsWith(
      t,
      queryAsRole(db.pool, role, "select * from bitrix_sync.perform_cutover('ops:x')"),
      "42501",
      role,
    );
  }
  const e = await rejectsWith(
    t,
    queryAsRole(db.pool, ADMIN, "select * from bitrix_sync.perform_cutover('  ')"),
    "BS004",
  );
  t.truthy(e.hint);
});

test("technical_dead_letters has one writer: _dead_letter(); every function that gives a row up calls it", async (t) => {
  const { rows } = await db.pool.query<{ fn: string; writes: boolean; calls: boolean }>(
    `select p.oid::regprocedure::text as fn,
            pg_get_functiondef(p.oid) ~* 'insert\\s+into\\s+bitrix_sync\\.technical_dead_letters' as writes,
            pg_get_functiondef(p.oid) ~* 'bitrix_sync\\._dead_letter\\(' as calls
       from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'bitrix_sync' and p.prokind = 'f'`,
  );
  t.deepEqual(
    rows.filter((r) => r.writes).map((r) => r.fn.replace(/\(.*/, "")),
    ["bitrix_sync._dead_letter"],
  );
  t.deepEqual(
    rows
      .filter((r) => r.calls && !r.fn.startsWith("bitrix_sync._dead_letter(")) // its own definition
      .map((r) => r.fn.replace(/\(.*/, ""))
      .sort(),
    [
      "bitrix_sync._dead_letter_command_row",
      "bitrix_sync._dead_letter_sync_task_row",
      "bitrix_sync._dead_letter_webhook_row",
      "bitrix_sync.resolve_command_reconcile",
      "bitrix_sync.schedule_workflow_retry",
    ],
  );
});
