// The rebind request's life (§5.4) through its SQL functions, fenced by the contact.rebind
// workflow's lease: start, and complete_rebind, which moves the link, finishes the request and
// resolves the user's conflict alerts in one call. Every other end of the workflow closes the
// request through the trigger (sql/rebind.sql), and App intents are held during a rebind.
import { randomBytes, randomInt, randomUUID } from "node:crypto";
import test from "ava";
import { makeUser } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Request {
  id: string;
  status: string;
  failure_code: string | null;
  outcome: string | null;
  target_contact_id: string;
  completed_at: Date | null;
}

const contactId = () => String(randomInt(1, 2 ** 47));

/** An active user linked to one Contact, with a rebind to another requested and its workflow held. */
async function rebinding() {
  const user = await makeUser(db.pool);
  const previous = contactId();
  const target = contactId();
  await db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [user.id, previous]);
  const { id: requestId } = await one<{ id: string }>(
    db.pool,
    "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'duplicate merged by the CRM team', 'ops:test') as id",
    [user.id, target],
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

const call = (fn: string, workflowId: string, token: string | null, ...rest: unknown[]) =>
  one<Request>(
    db.pool,
    `select * from bitrix_sync.${fn}($1, $2${rest.map((_, i) => `, $${i + 3}`).join("")})`,
    [workflowId, token, ...rest],
  );

const request = (id: string) =>
  one<Request>(db.pool, "select * from bitrix_sync.rebind_requests where id = $1", [id]);

function raise(type: string, userId: string) {
  return one<{ id: string }>(db.pool, "select id from bitrix_sync.raise_business_alert($1, 'high', $2, $3)", [
    type,
    randomBytes(32).toString("hex"),
    userId,
  ]);
}

test("start_rebind_request: requested -> in_progress, and again returns it unchanged", async (t) => {
  const r = await rebinding();
  t.like(await call("start_rebind_request", r.workflowId, r.token), {
    id: r.requestId,
    status: "in_progress",
  });
  t.like(await call("start_rebind_request", r.workflowId, r.token), { status: "in_progress" });
  await rejectsWith(t, call("start_rebind_request", r.workflowId, randomUUID()), "BS001");
});

test("complete_rebind moves the link, finishes the request and resolves the user's conflicts", async (t) => {
  const r = await rebinding();
  const other = await makeUser(db.pool);
  const mismatch = await raise("user_id_mismatch", r.user.id);
  const duplicates = await raise("duplicate_contacts", r.user.id);
  const phone = await raise("invalid_phone", r.user.id);
  const elsewhere = await raise("user_id_mismatch", other.id);

  // Not started yet: the request is not in progress.
  await rejectsWith(t, call("complete_rebind", r.workflowId, r.token), "BS002");
  await call("start_rebind_request", r.workflowId, r.token);
  await rejectsWith(t, call("complete_rebind", r.workflowId, randomUUID()), "BS001");

  const done = await call("complete_rebind", r.workflowId, r.token);
  t.like(done, { id: r.requestId, status: "succeeded", failure_code: null });
  t.truthy(done.completed_at);
  const { rows: links } = await db.pool.query(
    "select external_id, status, close_reason, workflow_id from bitrix_sync.entity_external_mapping where entity_id = $1 order by opened_at",
    [r.user.id],
  );
  t.deepEqual(links, [
    { external_id: r.previous, status: "closed", close_reason: "rebound", workflow_id: r.workflowId },
    { external_id: r.target, status: "active", close_reason: null, workflow_id: r.workflowId },
  ]);
  const { rows: alerts } = await db.pool.query<{ id: string; status: string; crm_sync_status: string }>(
    "select id, status, crm_sync_status from bitrix_sync.business_alerts where id = any($1) order by id",
    [[mismatch.id, duplicates.id, phone.id, elsewhere.id]],
  );
  const byId = new Map(alerts.map((a) => [a.id, a]));
  t.like(byId.get(mismatch.id), { status: "resolved", crm_sync_status: "pending" });
  t.like(byId.get(duplicates.id), { status: "resolved", crm_sync_status: "pending" });
  t.like(byId.get(phone.id), { status: "open" }, "not a link conflict");
  t.like(byId.get(elsewhere.id), { status: "open" }, "another user's alert");

  // Finished is final.
  await rejectsWith(t, call("complete_rebind", r.workflowId, r.token), "BS002");
  t.is((await request(r.requestId)).outcome, "rebound");
});

test("complete_rebind changes nothing when the target was linked to another user meanwhile (BS006)", async (t) => {
  const r = await rebinding();
  await call("start_rebind_request", r.workflowId, r.token);
  const other = await makeUser(db.pool);
  await db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [other.id, r.target]);
  await rejectsWith(t, call("complete_rebind", r.workflowId, r.token), "BS006");
  t.is((await request(r.requestId)).status, "in_progress");
  const { rows } = await db.pool.query(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [r.user.id],
  );
  t.deepEqual(rows, [{ external_id: r.previous }], "the old link is still the active one");
});

test("a workflow without a rebind request is refused (BS005)", async (t) => {
  const { workflow_id: id } = await one<{ workflow_id: string }>(
    db.pool,
    "select * from bitrix_sync.start_or_join_workflow($1, 'contact.map_or_create', $2, null)",
    [randomUUID(), randomUUID()],
  );
  const token = randomUUID();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", id, {
    state: "running",
    lease_token: token,
    locked_until: new Date(Date.now() + 60_000),
  });
  const err = await rejectsWith(t, call("start_rebind_request", id, token), "BS005");
  t.truthy(err.hint);
});

test("a second open rebind request to the same target Contact is refused (BS009), also around the function", async (t) => {
  const first = await rebinding();
  const other = await makeUser(db.pool);
  const err = await rejectsWith(
    t,
    db.pool.query(
      "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'the same Contact again', 'ops:test')",
      [other.id, first.target],
    ),
    "BS009",
  );
  t.regex(err.hint ?? "", /rebind_requests/);
  // The index holds for any writer: a request row naming the same open target.
  const dup = await rejectsWith(
    t,
    db.pool.query(
      `insert into bitrix_sync.rebind_requests (user_id, target_contact_id, reason, operator_id)
       values ($1, $2, 'by hand', 'owner')`,
      [other.id, first.target],
    ),
    "23505",
  );
  t.is(dup.constraint, "rebind_requests_one_open_per_target_uq");
  // Once the first request has finished, the target may be asked for again.
  await db.pool.query("select * from bitrix_sync.fire_workflow_event($1, $2, 'fail', $3)", [
    first.workflowId,
    first.token,
    JSON.stringify({ last_error_code: "crm_failure", outcome: "failed" }),
  ]);
  await t.notThrowsAsync(
    db.pool.query(
      "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'after the first failed', 'ops:test')",
      [other.id, first.target],
    ),
  );
});

test("a rebind request's audit never changes and the runtime role cannot write requests", async (t) => {
  const r = await rebinding();
  for (const set of ["reason = 'rewritten reason'", "operator_id = 'ops:else'", "target_contact_id = '1'"]) {
    await rejectsWith(
      t,
      db.pool.query(`update bitrix_sync.rebind_requests set ${set} where id = $1`, [r.requestId]),
      "BS031",
      set,
    );
  }
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local role bitrix_sync_user");
    await rejectsWith(
      t,
      c.query("update bitrix_sync.rebind_requests set reason = 'rewritten reason' where id = $1", [
        r.requestId,
      ]),
      "42501",
    );
  } finally {
    await c.query("rollback");
    c.release();
  }
  // The workflow's functions still move it, as the runtime role (security definer).
  const c2 = await db.pool.connect();
  try {
    await c2.query("begin");
    await c2.query("set local role bitrix_sync_user");
    const { rows } = await c2.query("select status from bitrix_sync.start_rebind_request($1, $2)", [
      r.workflowId,
      r.token,
    ]);
    t.is(rows[0].status, "in_progress");
  } finally {
    await c2.query("rollback");
    c2.release();
  }
});

const fire = (
  workflowId: string,
  token: string | null,
  event: string,
  changes: Record<string, unknown> = {},
) =>
  one(db.pool, "select * from bitrix_sync.fire_workflow_event($1, $2, $3, $4)", [
    workflowId,
    token,
    event,
    JSON.stringify(changes),
  ]);

const activeLink = async (userId: string) =>
  (
    await db.pool.query(
      "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
      [userId],
    )
  ).rows;

test("a rebind workflow that fails closes its request failed with the workflow's code; the link stays", async (t) => {
  const r = await rebinding();
  await call("start_rebind_request", r.workflowId, r.token);
  await fire(r.workflowId, r.token, "fail", { last_error_code: "permission_denied", outcome: "failed" });
  const req = await request(r.requestId);
  t.like(req, { status: "failed", failure_code: "permission_denied", outcome: "crm_unchanged" });
  t.truthy(req.completed_at);
  t.deepEqual(await activeLink(r.user.id), [{ external_id: r.previous }]);
  // The user can be rebound again at once.
  const again = await one<{ id: string }>(
    db.pool,
    "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'second try after the fix', 'ops:test') as id",
    [r.user.id, r.target],
  );
  t.truthy(again.id);
});

test("a rebind whose step exhausts its retries (past the horizon) closes its request failed", async (t) => {
  const r = await rebinding();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", r.workflowId, {
    created_at: new Date(Date.now() - 25 * 3600_000),
  });
  const wf = await one<{ state: string }>(
    db.pool,
    "select state from bitrix_sync.schedule_workflow_retry($1, $2, 'step_failed', interval '1 second')",
    [r.workflowId, r.token],
  );
  t.is(wf.state, "failed");
  t.like(await request(r.requestId), { status: "failed", failure_code: "retry_horizon_exceeded" });
});

test("a cancelled rebind workflow cancels its request; a succeeded one that never completed fails it", async (t) => {
  const a = await rebinding();
  await fire(a.workflowId, a.token, "cancel");
  t.like(await request(a.requestId), { status: "cancelled", failure_code: null, outcome: "crm_unchanged" });
  const b = await rebinding();
  await call("start_rebind_request", b.workflowId, b.token);
  await fire(b.workflowId, b.token, "succeed", { outcome: "not_eligible" });
  t.like(await request(b.requestId), { status: "failed", failure_code: "rebind_not_completed" });
});

/** A write of the rebind, put straight into `status` (sent once unless pending). */
async function rebindWrite(workflowId: string, setUser: "self" | "clear", status: string) {
  const { rows } = await db.pool.query<{ id: string }>(
    `insert into bitrix_sync.crm_commands (workflow_id, command_type, params, status, first_sent_at, completed_at)
     values ($1, 'contact.update', $2, 'pending', null, null) returning id`,
    [workflowId, JSON.stringify({ contact_id: 1, set_user: setUser })],
  );
  const id = rows[0]?.id as string;
  const finished = status === "succeeded" || status === "dead_letter";
  await forceRow(db.pool, "bitrix_sync.crm_commands", id, {
    status,
    first_sent_at: status === "pending" ? null : new Date(),
    completed_at: finished ? new Date() : null,
  });
}

// [writes of the workflow, outcome recorded on the request]
const outcomes: Array<[Array<["self" | "clear", string]>, string]> = [
  [[], "crm_unchanged"],
  [[["self", "pending"]], "crm_unchanged"],
  [[["self", "uncertain"]], "target_write_unconfirmed"],
  [[["self", "dead_letter"]], "target_write_unconfirmed"],
  [[["self", "succeeded"]], "target_written"],
  [
    [
      ["self", "succeeded"],
      ["clear", "dead_letter"],
    ],
    "target_written_clear_unconfirmed",
  ],
  [
    [
      ["self", "succeeded"],
      ["clear", "dead_letter"],
      ["clear", "succeeded"],
    ],
    "target_written_previous_cleared",
  ],
];
for (const [writes, expected] of outcomes) {
  test(`a failed rebind records what the CRM holds: ${JSON.stringify(writes)} -> ${expected}`, async (t) => {
    const r = await rebinding();
    for (const [setUser, status] of writes) await rebindWrite(r.workflowId, setUser, status);
    await fire(r.workflowId, r.token, "fail", { last_error_code: "server_error", outcome: "failed" });
    t.is((await request(r.requestId)).outcome, expected);
  });
}

test("an App intent arriving during a rebind is held, not joined, and starts when the rebind ends", async (t) => {
  const r = await rebinding();
  const start = (intent: string, hash: string) =>
    one<{ workflow_id: string; action: string }>(
      db.pool,
      "select workflow_id, action from bitrix_sync.start_or_join_workflow($1, $2, $3, $4)",
      [r.user.id, intent, randomUUID(), hash.padEnd(64, "0")],
    );
  t.deepEqual(await start("contact.update", "a"), { workflow_id: r.workflowId, action: "held" });
  t.deepEqual(await start("contact.update", "a"), { workflow_id: r.workflowId, action: "unchanged" });
  t.deepEqual(await start("contact.deactivate", "b"), { workflow_id: r.workflowId, action: "held" });
  const wf = await one<{ intent_type: string; revision: number; held_intent_type: string; state: string }>(
    db.pool,
    "select intent_type, revision, held_intent_type, state from bitrix_sync.workflow_instances where id = $1",
    [r.workflowId],
  );
  t.like(wf, { intent_type: "contact.rebind", revision: 1, held_intent_type: "contact.deactivate" });

  await call("start_rebind_request", r.workflowId, r.token);
  await call("complete_rebind", r.workflowId, r.token);
  await fire(r.workflowId, r.token, "succeed", { outcome: "rebound" });
  const { rows } = await db.pool.query(
    "select workflow_type, intent_type, state, content_hash from bitrix_sync.workflow_instances where user_id = $1 order by created_at",
    [r.user.id],
  );
  t.deepEqual(rows, [
    {
      workflow_type: "contact.rebind",
      intent_type: "contact.rebind",
      state: "succeeded",
      content_hash: null,
    },
    {
      workflow_type: "contact.deactivate",
      intent_type: "contact.deactivate",
      state: "created",
      content_hash: "b".padEnd(64, "0"),
    },
  ]);
});

test("an intent held by a rebind that fails starts too (on the old link)", async (t) => {
  const r = await rebinding();
  await one(db.pool, "select * from bitrix_sync.start_or_join_workflow($1, 'contact.update', $2, null)", [
    r.user.id,
    randomUUID(),
  ]);
  await fire(r.workflowId, r.token, "fail", { last_error_code: "target_not_found", outcome: "failed" });
  const { rows } = await db.pool.query(
    "select workflow_type, state from bitrix_sync.workflow_instances where user_id = $1 and id <> $2",
    [r.user.id, r.workflowId],
  );
  t.deepEqual(rows, [{ workflow_type: "contact.update", state: "created" }]);
  t.deepEqual(await activeLink(r.user.id), [{ external_id: r.previous }]);
});

test("the rebind procedure refuses while the user's workflow is parked and says how to clear it", async (t) => {
  const user = await makeUser(db.pool);
  const { workflow_id: id } = await one<{ workflow_id: string }>(
    db.pool,
    "select * from bitrix_sync.start_or_join_workflow($1, 'contact.map_or_create', $2, null)",
    [user.id, randomUUID()],
  );
  await forceRow(db.pool, "bitrix_sync.workflow_instances", id, {
    state: "waiting_manual",
    last_error_code: "too_many_candidates",
  });
  const err = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.request_bitrix_contact_rebind($1, '77', 'wrong link', 'ops:test')", [
      user.id,
    ]),
    "BS007",
  );
  t.regex(err.message, /parked/);
  t.true(err.message.includes(id), "names the workflow");
  t.true(err.message.includes("too_many_candidates"), "names the reason");
  t.regex(err.hint ?? "", /resume_parked_workflow\(.*cancel_parked_workflow\(/s);
  t.false(err.message.includes(user.id), "no user id in the message");

  // A workflow in progress is a different sentence: it finishes by itself.
  await forceRow(db.pool, "bitrix_sync.workflow_instances", id, { state: "waiting_crm" });
  const busy = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.request_bitrix_contact_rebind($1, '77', 'wrong link', 'ops:test')", [
      user.id,
    ]),
    "BS007",
  );
  t.regex(busy.message, /in progress/);
  t.regex(busy.hint ?? "", /finishes on its own/);
});

test("a second request while one is open names the open one and how to watch or cancel it", async (t) => {
  const r = await rebinding();
  const err = await rejectsWith(
    t,
    db.pool.query(
      "select bitrix_sync.request_bitrix_contact_rebind($1, '78', 'another target', 'ops:test')",
      [r.user.id],
    ),
    "BS007",
  );
  t.true(err.message.includes(r.requestId));
  t.regex(err.hint ?? "", /rebind_request_status.*cancel_rebind_request/s);
  t.false(err.message.includes(r.user.id));
  t.false(err.message.includes(r.target));
});

test("the migration's repair closes requests whose workflow had already finished", async (t) => {
  // What migration 000014 (rebind-loop) ran once: the function the trigger uses (by id since 000028).
  const r = await rebinding();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", r.workflowId, {
    state: "failed",
    last_error_code: "server_error",
    lease_token: null,
    locked_by: null,
    locked_until: null,
    finished_at: new Date(),
  });
  t.is((await request(r.requestId)).status, "requested", "forced past the trigger, as before 000014");
  await db.pool.query("select bitrix_sync._close_rebind_request($1::uuid)", [r.workflowId]);
  t.like(await request(r.requestId), { status: "failed", failure_code: "server_error" });
});

test("the runtime cannot close a rebind request with a row it built; the function re-reads the workflow and wants it finished", async (t) => {
  const r = await rebinding();
  // The runtime reads workflows; a row it builds from one claims a failure that never happened.
  const forged = asRole(db.pool, "bitrix_sync_user", (c) =>
    c.query(
      `select bitrix_sync._close_rebind_request(
                jsonb_populate_record(w, '{"state": "failed", "last_error_code": "anything the caller likes"}'))
         from bitrix_sync.workflow_instances w where w.id = $1`,
      [r.workflowId],
    ),
  );
  const err = await t.throwsAsync(forged);
  t.true(["42883", "42501"].includes((err as { code?: string } | undefined)?.code ?? ""), err?.message);
  // Nor by the workflow's id: only the trigger (security definer) calls it.
  await rejectsWith(
    t,
    asRole(db.pool, "bitrix_sync_user", (c) =>
      c.query("select bitrix_sync._close_rebind_request($1::uuid)", [r.workflowId]),
    ),
    "42501",
  );
  t.like(await request(r.requestId), { status: "requested", failure_code: null });
  // Whoever calls it: a workflow still running closes nothing.
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync._close_rebind_request($1::uuid)", [r.workflowId]),
    "BS002",
  );
  t.like(await request(r.requestId), { status: "requested", failure_code: null });
});
