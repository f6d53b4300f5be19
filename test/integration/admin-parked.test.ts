// Parked workflows for the admin (docs/admin.md "Parked workflows"): listed with their reason and
// the decisions they accept, resumed with a decision or cancelled, each call audited, each refusal a
// SQLSTATE with a hint; the runtime and the App roles can do none of it.
import { randomBytes, randomInt, randomUUID } from "node:crypto";
import test from "ava";
import { createdWorkflow, type WorkflowRow } from "../helpers/builders.js";
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

/** A user's map_or_create parked for `reason`, with the business alert its step raised. */
async function parked(reason = "too_many_candidates") {
  const user = await makeUser(db.pool);
  const wf = await createdWorkflow(db.pool, { userId: user.id });
  await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
    state: "waiting_manual",
    current_step: "manual",
    last_error_code: reason,
    step_data: JSON.stringify({ pass: 1, as: "contact.map_or_create" }),
  });
  const alert = await one<{ alert_number: string }>(
    db.pool,
    "select alert_number from bitrix_sync.raise_business_alert($1, 'medium', $2, $3, p_correlation_id => $4)",
    [reason, randomBytes(32).toString("hex"), user.id, wf.correlation_id],
  );
  return { user, wf, alertNumber: Number(alert.alert_number) };
}

const workflow = (id: string) =>
  one<WorkflowRow>(db.pool, "select * from bitrix_sync.workflow_instances where id = $1", [id]);

const audit = (workflowId: string) =>
  db.pool
    .query(
      "select action, decision, contact_id, reason, operator_id, db_user from bitrix_sync.admin_actions where workflow_id = $1 order by id",
      [workflowId],
    )
    .then((r) => r.rows);

const resume = (
  id: string,
  decision: string | null,
  contact: string | null = null,
  reason = "fixed in the CRM",
) =>
  asRole(db.pool, "bitrix_sync_admin", (c) =>
    one<{ workflow_id: string; state: string; decision: string }>(
      c,
      "select * from bitrix_sync.resume_parked_workflow($1, $2, $3, 'ops:test', $4)",
      [id, decision, reason, contact],
    ),
  );

const cancel = (id: string, reason = "user asked us to stop") =>
  asRole(db.pool, "bitrix_sync_admin", (c) =>
    one<{ workflow_id: string; state: string }>(
      c,
      "select * from bitrix_sync.cancel_parked_workflow($1, $2, 'ops:test')",
      [id, reason],
    ),
  );

test("the admin lists parked workflows with reason, alert number and decisions, and no personal IDs", async (t) => {
  const a = await parked("too_many_candidates");
  const b = await parked("invalid_phone");
  const rows = await asRole(db.pool, "bitrix_sync_admin", async (c) => {
    const r = await c.query(
      "select * from bitrix_sync.parked_workflows where workflow_id = any($1) order by parked_at",
      [[a.wf.id, b.wf.id]],
    );
    return r.rows;
  });
  t.like(rows[0], {
    workflow_id: a.wf.id,
    workflow_type: "contact.map_or_create",
    reason: "too_many_candidates",
    alert_number: String(a.alertNumber),
    alert_type: "too_many_candidates",
    decisions: ["retry", "link_contact", "create_contact"],
  });
  t.like(rows[1], { workflow_id: b.wf.id, reason: "invalid_phone", decisions: ["retry"] });
  t.true(rows[0].parked_for_sec >= 0);
  t.deepEqual(Object.keys(rows[0]).sort(), [
    "alert_number",
    "alert_type",
    "decisions",
    "parked_at",
    "parked_for_sec",
    "reason",
    "workflow_id",
    "workflow_type",
  ]);
  const text = JSON.stringify(rows);
  t.false(text.includes(a.user.id) || text.includes(b.user.id), "no user id");
});

test("retry resumes a fresh pass of the workflow's intent, audited", async (t) => {
  const p = await parked("invalid_phone");
  t.deepEqual(await resume(p.wf.id, "retry"), { workflow_id: p.wf.id, state: "running", decision: "retry" });
  const wf = await workflow(p.wf.id);
  t.like(wf, {
    state: "running",
    current_step: "start",
    lease_token: null,
    last_error_code: "invalid_phone",
  });
  t.deepEqual(wf.step_data, { pass: wf.revision, as: "contact.map_or_create" });
  t.true(wf.next_attempt_at.getTime() <= Date.now() + 1000, "due at once");
  t.deepEqual(await audit(p.wf.id), [
    {
      action: "resume_workflow",
      decision: "retry",
      contact_id: null,
      reason: "fixed in the CRM",
      operator_id: "ops:test",
      db_user: "postgres",
    },
  ]);
});

test("link_contact and create_contact put the person's decision into the new pass", async (t) => {
  const a = await parked();
  const target = contactId();
  await resume(a.wf.id, "link_contact", ` ${target} `);
  t.deepEqual((await workflow(a.wf.id)).step_data.manual, { decision: "link_contact", contact_id: target });
  t.like((await audit(a.wf.id))[0], { decision: "link_contact", contact_id: target });

  const b = await parked("manual_link_not_found");
  await resume(b.wf.id, "create_contact");
  t.deepEqual((await workflow(b.wf.id)).step_data.manual, { decision: "create_contact" });
});

test("resume refuses what it cannot do, each time with a SQLSTATE and a hint, and changes nothing", async (t) => {
  const p = await parked("invalid_phone");
  const tm = await parked("too_many_candidates");
  const other = await makeUser(db.pool);
  const taken = contactId();
  await db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [other.id, taken]);
  const running = await createdWorkflow(db.pool);
  const cases: Array<[string, () => Promise<unknown>, string, RegExp]> = [
    ["no reason", () => resume(p.wf.id, "retry", null, " "), "BS004", /Say why/],
    ["unknown decision", () => resume(p.wf.id, "merge"), "BS004", /parked_workflows/],
    ["no decision", () => resume(p.wf.id, null), "BS004", /parked_workflows/],
    ["link without a Contact", () => resume(tm.wf.id, "link_contact"), "BS004", /link_contact/],
    ["link with a malformed Contact", () => resume(tm.wf.id, "link_contact", "12a"), "BS004", /link_contact/],
    ["a Contact with retry", () => resume(tm.wf.id, "retry", "12"), "BS004", /Leave p_contact_id out/],
    [
      "a decision the reason does not take",
      () => resume(p.wf.id, "create_contact"),
      "BS004",
      /For invalid_phone use retry/,
    ],
    ["unknown workflow", () => resume(randomUUID(), "retry"), "BS005", /parked_workflows/],
    ["not parked", () => resume(running.id, "retry"), "BS002", /parked_workflows/],
    [
      "a Contact of another active user",
      () => resume(tm.wf.id, "link_contact", taken),
      "BS006",
      /another Contact/,
    ],
  ];
  for (const [note, call, code, hint] of cases) {
    const err = await rejectsWith(t, call(), code, note);
    t.regex(err.hint ?? "", hint, note);
  }
  t.is((await workflow(p.wf.id)).state, "waiting_manual");
  t.is((await workflow(tm.wf.id)).state, "waiting_manual");
  t.deepEqual(await audit(p.wf.id), []);
});

test("cancel ends a parked workflow, audited; the user's next App change starts a new one", async (t) => {
  const p = await parked("unknown_citizenship");
  t.deepEqual(await cancel(p.wf.id), { workflow_id: p.wf.id, state: "cancelled" });
  const wf = await workflow(p.wf.id);
  t.like(wf, { state: "cancelled", outcome: "cancelled_by_admin", last_error_code: "unknown_citizenship" });
  t.truthy(wf.finished_at);
  t.like((await audit(p.wf.id))[0], { action: "cancel_workflow", reason: "user asked us to stop" });
  const next = await one<{ action: string }>(
    db.pool,
    "select action from bitrix_sync.start_or_join_workflow($1, 'contact.update', $2, null)",
    [p.user.id, randomUUID()],
  );
  t.is(next.action, "started");
});

test("cancel refuses an unknown, a running or a rebind workflow, with a hint", async (t) => {
  const running = await createdWorkflow(db.pool);
  const user = await makeUser(db.pool);
  const { id: requestId } = await one<{ id: string }>(
    db.pool,
    "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'wrong Contact', 'ops:test') as id",
    [user.id, contactId()],
  );
  const { workflow_id: rebindWf } = await one<{ workflow_id: string }>(
    db.pool,
    "select workflow_id from bitrix_sync.rebind_requests where id = $1",
    [requestId],
  );
  const p = await parked();
  for (const [note, call, code, hint] of [
    ["unknown", () => cancel(randomUUID()), "BS005", /parked_workflows/],
    ["running", () => cancel(running.id), "BS002", /finishes on its own/],
    ["rebind", () => cancel(rebindWf), "BS004", new RegExp(`cancel_rebind_request\\('${requestId}'`)],
    ["no reason", () => cancel(p.wf.id, "no"), "BS004", /Say why/],
  ] as Array<[string, () => Promise<unknown>, string, RegExp]>) {
    const err = await rejectsWith(t, call(), code, note);
    t.regex(err.hint ?? "", hint, note);
  }
  t.is((await workflow(p.wf.id)).state, "waiting_manual");
});

test("the runtime and the App roles can neither list, resume nor cancel parked workflows", async (t) => {
  const p = await parked();
  for (const role of ["bitrix_sync_user", "han_app_user"] as const) {
    for (const sql of [
      "select * from bitrix_sync.parked_workflows",
      `select * from bitrix_sync.resume_parked_workflow('${p.wf.id}', 'retry', 'fixed it', 'ops:x')`,
      `select * from bitrix_sync.cancel_parked_workflow('${p.wf.id}', 'stop it', 'ops:x')`,
      "select * from bitrix_sync.admin_actions",
    ]) {
      await rejectsWith(
        t,
        asRoleRolledBack(db.pool, role, (c) => c.query(sql)),
        "42501",
        `${role}: ${sql}`,
      );
    }
  }
  t.is((await workflow(p.wf.id)).state, "waiting_manual");
});

test("the admin reads the audit but not the Contact a decision named", async (t) => {
  const p = await parked();
  await resume(p.wf.id, "link_contact", contactId());
  const rows = await asRole(
    db.pool,
    "bitrix_sync_admin",
    async (c) =>
      (
        await c.query(
          "select action, decision, reason, operator_id from bitrix_sync.admin_actions where workflow_id = $1",
          [p.wf.id],
        )
      ).rows,
  );
  t.deepEqual(rows, [
    {
      action: "resume_workflow",
      decision: "link_contact",
      reason: "fixed in the CRM",
      operator_id: "ops:test",
    },
  ]);
  await rejectsWith(
    t,
    asRoleRolledBack(db.pool, "bitrix_sync_admin", (c) =>
      c.query("select contact_id from bitrix_sync.admin_actions"),
    ),
    "42501",
  );
  await rejectsWith(
    t,
    asRoleRolledBack(db.pool, "bitrix_sync_admin", (c) => c.query("delete from bitrix_sync.admin_actions")),
    "42501",
  );
  await rejectsWith(t, db.pool.query("delete from bitrix_sync.admin_actions"), "BS003");
});
