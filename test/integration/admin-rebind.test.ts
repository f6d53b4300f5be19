// Open rebind requests for the admin (docs/admin.md "Rebind"): watched through a view without
// personal IDs, cancelled with a reason. A cancel stops the workflow and its unsent commands, starts
// an App change held during the rebind, and records what the CRM already holds; it waits for a write
// in flight. The runtime and the App roles can do none of it.
import { randomInt, randomUUID } from "node:crypto";
import test from "ava";
import { makeUser } from "../helpers/factories.js";
import { asRole, asRoleRolledBack } from "../helpers/roles.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const contactId = () => String(randomInt(1, 2 ** 47));

/** A linked user with a rebind requested (as the admin); its workflow running under a lease. */
async function requested() {
  const user = await makeUser(db.pool);
  const previous = contactId();
  const target = contactId();
  await db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [user.id, previous]);
  const requestId = await asRole(
    db.pool,
    "bitrix_sync_admin",
    async (c) =>
      (
        await one<{ id: string }>(
          c,
          "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'duplicate merged by the CRM team', 'ops:test') as id",
          [user.id, target],
        )
      ).id,
  );
  const { workflow_id: workflowId } = await one<{ workflow_id: string }>(
    db.pool,
    "select workflow_id from bitrix_sync.rebind_requests where id = $1",
    [requestId],
  );
  const token = randomUUID();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", workflowId, {
    state: "running",
    lease_token: token,
    locked_by: "w",
    locked_until: new Date(Date.now() + 60_000),
  });
  return { user, previous, target, requestId, workflowId, token };
}

/** The workflow issues a write (waiting_crm), put straight into `status`. */
async function write(r: { workflowId: string; token: string }, setUser: "self" | "clear", status: string) {
  const cmd = await one<{ id: string }>(
    db.pool,
    "select * from bitrix_sync.issue_command($1, $2, 'contact.update', $3, 'rebind_target')",
    [
      r.workflowId,
      r.token,
      JSON.stringify({ contact_id: 1, set_user: setUser, registered: setUser === "self" }),
    ],
  );
  const held = status === "leased" || status === "in_flight";
  const done = status === "succeeded" || status === "dead_letter";
  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd.id, {
    status,
    lease_token: held ? randomUUID() : null,
    locked_until: held ? new Date(Date.now() + 60_000) : null,
    first_sent_at: status === "pending" || status === "leased" ? null : new Date(),
    completed_at: done ? new Date() : null,
  });
  return cmd.id;
}

const cancel = (requestId: string, reason = "the CRM team merged it by hand") =>
  asRole(db.pool, "bitrix_sync_admin", async (c, notices) => ({
    row: await one<Record<string, unknown>>(
      c,
      "select * from bitrix_sync.cancel_rebind_request($1, $2, 'ops:test')",
      [requestId, reason],
    ),
    notices,
  }));

const status = (requestId: string) =>
  asRole(db.pool, "bitrix_sync_admin", (c) =>
    one<Record<string, unknown>>(c, "select * from bitrix_sync.rebind_request_status where request_id = $1", [
      requestId,
    ]),
  );

test("the admin watches a request without seeing user or Contact IDs or the reason text", async (t) => {
  const r = await requested();
  await one(db.pool, "select * from bitrix_sync.start_or_join_workflow($1, 'contact.update', $2, null)", [
    r.user.id,
    randomUUID(),
  ]);
  const row = await status(r.requestId);
  t.like(row, {
    request_id: r.requestId,
    status: "requested",
    failure_code: null,
    outcome: null,
    operator_id: "ops:test",
    workflow_id: r.workflowId,
    workflow_state: "running",
    held_intent_type: "contact.update",
  });
  const text = JSON.stringify(row);
  for (const secret of [r.user.id, r.previous, r.target, "duplicate merged"])
    t.false(text.includes(secret), secret);
});

test("cancelling a request not yet started: nothing reached the CRM, its pending read is dropped", async (t) => {
  const r = await requested();
  const cmd = await one<{ id: string }>(
    db.pool,
    "select id from bitrix_sync.issue_command($1, $2, 'contact.read', '{\"ids\": [1]}', 'rebind_read')",
    [r.workflowId, r.token],
  );
  const { row, notices } = await cancel(r.requestId);
  t.deepEqual(row, {
    request_id: r.requestId,
    status: "cancelled",
    outcome: "crm_unchanged",
    workflow_id: r.workflowId,
    workflow_state: "cancelled",
  });
  t.deepEqual(notices, []);
  const req = await one(
    db.pool,
    "select cancelled_by, cancel_reason, completed_at from bitrix_sync.rebind_requests where id = $1",
    [r.requestId],
  );
  t.like(req, { cancelled_by: "ops:test", cancel_reason: "the CRM team merged it by hand" });
  const c = await one(db.pool, "select status, last_error_code from bitrix_sync.crm_commands where id = $1", [
    cmd.id,
  ]);
  t.deepEqual(c, { status: "dead_letter", last_error_code: "rebind_cancelled" });
  const dlq = await db.pool.query("select 1 from bitrix_sync.technical_dead_letters where command_id = $1", [
    cmd.id,
  ]);
  t.is(dlq.rows.length, 0, "a cancel is not a technical failure");
  const audit = await db.pool.query(
    "select action, workflow_id, rebind_request_id, reason, operator_id from bitrix_sync.admin_actions where rebind_request_id = $1",
    [r.requestId],
  );
  t.deepEqual(audit.rows, [
    {
      action: "cancel_rebind_request",
      workflow_id: r.workflowId,
      rebind_request_id: r.requestId,
      reason: "the CRM team merged it by hand",
      operator_id: "ops:test",
    },
  ]);
  // The user's link is untouched and a new request is accepted.
  const { rows } = await db.pool.query(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [r.user.id],
  );
  t.deepEqual(rows, [{ external_id: r.previous }]);
  await db.pool.query("select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'try again', 'ops:test')", [
    r.user.id,
    r.target,
  ]);
});

test("cancelling after the target write landed says so in the outcome and in a notice", async (t) => {
  const r = await requested();
  await db.pool.query("select bitrix_sync.start_rebind_request($1, $2)", [r.workflowId, r.token]);
  await write(r, "self", "succeeded");
  await forceRow(db.pool, "bitrix_sync.workflow_instances", r.workflowId, {
    state: "running",
    lease_token: r.token,
    locked_until: new Date(Date.now() + 60_000),
  });
  const clear = await write(r, "clear", "pending");
  const { row, notices } = await cancel(r.requestId);
  t.like(row, { status: "cancelled", outcome: "target_written" });
  t.is(notices.length, 1);
  t.regex(notices[0] ?? "", /already changed: target_written/);
  const c = await one(db.pool, "select status from bitrix_sync.crm_commands where id = $1", [clear]);
  t.is(c.status, "dead_letter", "the clear is not sent after the cancel");
  // The worker that held the lease is fenced off.
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.save_workflow_step($1, $2, '{}')", [r.workflowId, r.token]),
    "BS001",
  );
});

test("an unresolved write is closed and recorded as unconfirmed", async (t) => {
  const r = await requested();
  const cmd = await write(r, "self", "uncertain");
  const { row } = await cancel(r.requestId);
  t.like(row, { outcome: "target_write_unconfirmed" });
  const c = await one(db.pool, "select status, last_error_code from bitrix_sync.crm_commands where id = $1", [
    cmd,
  ]);
  t.deepEqual(c, { status: "dead_letter", last_error_code: "rebind_cancelled" });
});

test("a write in flight makes the cancel wait (BS007), a leased one is dropped before it is sent", async (t) => {
  const r = await requested();
  const cmd = await write(r, "self", "in_flight");
  const err = await rejectsWith(t, cancel(r.requestId), "BS007");
  t.regex(err.hint ?? "", /Try again in a few seconds/);
  t.is((await status(r.requestId)).status, "requested");

  await forceRow(db.pool, "bitrix_sync.crm_commands", cmd, {
    status: "leased",
    first_sent_at: null,
    sent_at: null,
  });
  const { row } = await cancel(r.requestId);
  t.like(row, { status: "cancelled", outcome: "crm_unchanged" });
  const lease = await one<{ lease_token: string | null }>(
    db.pool,
    "select lease_token from bitrix_sync.crm_commands where id = $1",
    [cmd],
  );
  t.is(lease.lease_token, null);
  const { rows } = await db.pool.query(
    "select * from bitrix_sync.send_commands($1::bigint[], $2::uuid[], $3)",
    [[cmd], [randomUUID()], randomUUID()],
  );
  t.deepEqual(rows, [], "the pump's send marker skips it");
});

test("an App change held during the rebind starts when the request is cancelled", async (t) => {
  const r = await requested();
  await one(db.pool, "select * from bitrix_sync.start_or_join_workflow($1, 'contact.update', $2, null)", [
    r.user.id,
    randomUUID(),
  ]);
  await cancel(r.requestId);
  const { rows } = await db.pool.query(
    "select workflow_type, state from bitrix_sync.workflow_instances where user_id = $1 order by created_at",
    [r.user.id],
  );
  t.deepEqual(rows, [
    { workflow_type: "contact.rebind", state: "cancelled" },
    { workflow_type: "contact.update", state: "created" },
  ]);
});

test("cancel refuses an unknown or finished request and a missing reason, with hints", async (t) => {
  const r = await requested();
  await cancel(r.requestId);
  for (const [note, call, code, hint] of [
    ["unknown", () => cancel(randomUUID()), "BS005", /rebind_request_status/],
    ["finished", () => cancel(r.requestId), "BS002", /outcome/],
    ["no reason", () => cancel(r.requestId, ""), "BS004", /Say why/],
  ] as Array<[string, () => Promise<unknown>, string, RegExp]>) {
    const err = await rejectsWith(t, call(), code, note);
    t.regex(err.hint ?? "", hint, note);
  }
});

test("the runtime and the App roles can neither watch nor cancel rebind requests", async (t) => {
  const r = await requested();
  for (const role of ["bitrix_sync_user", "han_app_user"] as const) {
    for (const sql of [
      "select * from bitrix_sync.rebind_request_status",
      `select * from bitrix_sync.cancel_rebind_request('${r.requestId}', 'stop it', 'ops:x')`,
    ]) {
      await rejectsWith(
        t,
        asRoleRolledBack(db.pool, role, (c) => c.query(sql)),
        "42501",
        `${role}: ${sql}`,
      );
    }
  }
  t.is((await status(r.requestId)).status, "requested");
});
