// The rebind request's life (§5.4) through its SQL functions, fenced by the contact.rebind
// workflow's lease: start, fail, and complete_rebind, which moves the link, finishes the request and
// resolves the user's conflict alerts in one call.
import { randomBytes, randomInt, randomUUID } from "node:crypto";
import test from "ava";
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

interface Request {
  id: string;
  status: string;
  failure_code: string | null;
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
  await rejectsWith(t, call("fail_rebind_request", r.workflowId, r.token, "target_not_found"), "BS002");
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

test("fail_rebind_request: requested or in_progress -> failed with a safe code; the mapping stays", async (t) => {
  const a = await rebinding();
  t.like(await call("fail_rebind_request", a.workflowId, a.token, "user_not_eligible"), {
    status: "failed",
    failure_code: "user_not_eligible",
  });
  const b = await rebinding();
  await call("start_rebind_request", b.workflowId, b.token);
  await rejectsWith(
    t,
    call("fail_rebind_request", b.workflowId, b.token, "Contact 12 belongs to Ivan"),
    "BS004",
  );
  await rejectsWith(t, call("fail_rebind_request", b.workflowId, randomUUID(), "target_not_found"), "BS001");
  const failed = await call("fail_rebind_request", b.workflowId, b.token, "target_bound_to_other_user");
  t.like(failed, { status: "failed", failure_code: "target_bound_to_other_user" });
  t.truthy(failed.completed_at);
  await rejectsWith(t, call("start_rebind_request", b.workflowId, b.token), "BS002");
  const { rows } = await db.pool.query(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [b.user.id],
  );
  t.deepEqual(rows, [{ external_id: b.previous }]);
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
  await call("fail_rebind_request", first.workflowId, first.token, "crm_failure");
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
