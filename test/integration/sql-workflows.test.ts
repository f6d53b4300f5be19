// Workflows (§7.1): start or join per user, SKIP LOCKED claims with lease tokens, transitions by
// event name through fire_workflow_event(), and the guard trigger behind hand-written UPDATEs.
// Tests that claim are serial: a claim takes every runnable workflow of this file's database.
import { randomUUID } from "node:crypto";
import test from "ava";
import { inTransaction } from "../../src/db/tx.js";
import { createdWorkflow, runningWorkflow, type WorkflowRow, workflowIn } from "../helpers/builders.js";
import { claimWorkflows } from "../helpers/claims.js";
import { forceInsert, forceRow, one, type Queryable, rejectsWith, session } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const TERMINAL = ["succeeded", "failed", "cancelled"];
const hash = (s: string) => s.padEnd(64, "0");

async function start(
  q: Queryable,
  userId: string,
  intent = "contact.map_or_create",
  contentHash: string | null = hash("a"),
  taskId: string = randomUUID(),
): Promise<{ workflow_id: string; action: string }> {
  return one(q, "select workflow_id, action from bitrix_sync.start_or_join_workflow($1, $2, $3, $4)", [
    userId,
    intent,
    taskId,
    contentHash,
  ]);
}

async function get(id: string): Promise<WorkflowRow> {
  return one<WorkflowRow>(db.pool, "select * from bitrix_sync.workflow_instances where id = $1", [id]);
}

const claim = claimWorkflows<WorkflowRow>;

function fire(id: string, token: string | null, event: string, changes: Record<string, unknown> = {}) {
  return one<WorkflowRow>(db.pool, "select * from bitrix_sync.fire_workflow_event($1, $2, $3, $4)", [
    id,
    token,
    event,
    JSON.stringify(changes),
  ]);
}

/** A new workflow claimed by claim_workflows (which takes every runnable one: serial tests only). */
async function claimedWorkflow(): Promise<WorkflowRow> {
  const { id } = await createdWorkflow(db.pool);
  const mine = (await claim(db.pool, "w-setup")).find((w) => w.id === id);
  if (!mine) throw new Error("setup: the new workflow was not claimed");
  return mine;
}

test("start_or_join_workflow starts a created workflow for a user without one", async (t) => {
  const userId = randomUUID();
  const taskId = randomUUID();
  const out = await start(db.pool, userId, "contact.update", hash("b"), taskId);
  t.is(out.action, "started");
  const w = await get(out.workflow_id);
  t.like(w, {
    workflow_type: "contact.update",
    intent_type: "contact.update",
    user_id: userId,
    state: "created",
    revision: 1,
    processed_revision: 0,
    content_hash: hash("b"),
    source_task_id: taskId,
    lease_token: null,
    finished_at: null,
  });
});

test("a newer intent joins the active workflow and bumps its revision", async (t) => {
  const userId = randomUUID();
  const first = await start(db.pool, userId, "contact.map_or_create", hash("1"));
  const task2 = randomUUID();
  const second = await start(db.pool, userId, "contact.map_or_create", hash("2"), task2);
  t.deepEqual(second, { workflow_id: first.workflow_id, action: "joined" });
  t.like(await get(first.workflow_id), {
    revision: 2,
    content_hash: hash("2"),
    source_task_id: task2,
    intent_type: "contact.map_or_create",
  });

  // A different intent with the same content joins too; the scenario type stays what it started as.
  const third = await start(db.pool, userId, "contact.deactivate", hash("2"));
  t.deepEqual(third, { workflow_id: first.workflow_id, action: "joined" });
  t.like(await get(first.workflow_id), {
    revision: 3,
    intent_type: "contact.deactivate",
    workflow_type: "contact.map_or_create",
  });
  const { rows } = await db.pool.query("select id from bitrix_sync.workflow_instances where user_id = $1", [
    userId,
  ]);
  t.is(rows.length, 1);
});

test("an equal intent with an equal content hash leaves the workflow unchanged", async (t) => {
  const userId = randomUUID();
  const task1 = randomUUID();
  const first = await start(db.pool, userId, "contact.update", hash("c"), task1);
  const before = await get(first.workflow_id);
  const again = await start(db.pool, userId, "contact.update", hash("c"));
  t.deepEqual(again, { workflow_id: first.workflow_id, action: "unchanged" });
  const after = await get(first.workflow_id);
  t.is(after.revision, 1);
  t.is(after.source_task_id, task1);
  t.deepEqual(after, before);

  // A null hash equals a null hash.
  const other = randomUUID();
  await start(db.pool, other, "contact.deactivate", null);
  t.is((await start(db.pool, other, "contact.deactivate", null)).action, "unchanged");
});

test("a finished workflow does not block a new one for the same user", async (t) => {
  const userId = randomUUID();
  const first = await start(db.pool, userId);
  await fire(first.workflow_id, null, "cancel");
  const second = await start(db.pool, userId);
  t.is(second.action, "started");
  t.not(second.workflow_id, first.workflow_id);
});

test("the unique index allows one active workflow per user", async (t) => {
  const userId = randomUUID();
  await start(db.pool, userId);
  const err = await rejectsWith(
    t,
    db.pool.query(
      "insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id) values ('contact.update', 'contact.update', $1)",
      [userId],
    ),
    "23505",
  );
  t.is(err.constraint, "workflow_instances_one_active_per_user_uq");
  // Finished rows are history and do not count (born finished only with the guards off).
  await t.notThrowsAsync(
    forceInsert(db.pool, "bitrix_sync.workflow_instances", {
      workflow_type: "contact.update",
      intent_type: "contact.update",
      user_id: userId,
      state: "succeeded",
      finished_at: new Date(),
    }),
  );
});

test("concurrent start_or_join_workflow calls for one user converge on one workflow", async (t) => {
  for (let round = 0; round < 20; round++) {
    const userId = randomUUID();
    const a = await session(db.pool);
    const b = await session(db.pool);
    try {
      await a.c.query("begin");
      await b.c.query("begin");
      const first = await start(a.c, userId, "contact.map_or_create", hash("x"));
      // b blocks on a's uncommitted row until a commits, then must join it, not fail.
      const second = start(b.c, userId, "contact.update", hash("y"));
      await new Promise((r) => setTimeout(r, 20));
      await a.c.query("commit");
      const joined = await second;
      await b.c.query("commit");
      t.is(first.action, "started");
      t.deepEqual(joined, { workflow_id: first.workflow_id, action: "joined" });
    } finally {
      await a.c.query("rollback").catch(() => undefined);
      await b.c.query("rollback").catch(() => undefined);
      a.done();
      b.done();
    }
    const { rows } = await db.pool.query<WorkflowRow>(
      "select * from bitrix_sync.workflow_instances where user_id = $1",
      [userId],
    );
    t.is(rows.length, 1);
    t.like(rows[0], { revision: 2, intent_type: "contact.update" });
  }
});

test.serial("claim moves created -> running under a new lease and counts the attempt", async (t) => {
  const { id: workflow_id } = await createdWorkflow(db.pool);
  const claimed = (await claim(db.pool, "worker-1", 1000, "30 seconds")).find((w) => w.id === workflow_id);
  t.truthy(claimed);
  t.like(claimed, { state: "running", locked_by: "worker-1", attempt_count: 1 });
  t.regex(claimed?.lease_token ?? "", /^[0-9a-f-]{36}$/);
  const { ok } = await one<{ ok: boolean }>(
    db.pool,
    "select locked_until between now() + interval '25 seconds' and now() + interval '35 seconds' as ok from bitrix_sync.workflow_instances where id = $1",
    [workflow_id],
  );
  t.true(ok);
  // A held, unexpired lease is not claimed again.
  t.false((await claim(db.pool, "worker-2")).some((w) => w.id === workflow_id));
});

test.serial("claim_workflows refuses a zero limit or a non-positive lease (BS004)", async (t) => {
  await rejectsWith(t, claim(db.pool, "w", 0), "BS004");
  await rejectsWith(t, claim(db.pool, "w", 10, "0 seconds"), "BS004");
});

test.serial("two connections claiming at once never get the same workflow", async (t) => {
  const ids: string[] = [];
  for (let i = 0; i < 12; i++) ids.push((await createdWorkflow(db.pool)).id);

  // Explicit steps: a holds its claim uncommitted; b claims meanwhile and must skip a's rows.
  const a = await session(db.pool);
  const b = await session(db.pool);
  try {
    await a.c.query("begin");
    await b.c.query("begin");
    const byA = (await claim(a.c, "a", 5)).map((w) => w.id);
    const byB = (await claim(b.c, "b", 1000)).map((w) => w.id);
    await a.c.query("commit");
    await b.c.query("commit");
    t.is(byA.length, 5);
    t.deepEqual(
      byA.filter((id) => byB.includes(id)),
      [],
    );
    for (const id of ids) t.true(byA.includes(id) || byB.includes(id), id);
  } finally {
    a.done();
    b.done();
  }

  // Racing: many rounds of two claims at the same time.
  for (let round = 0; round < 20; round++) {
    const fresh: string[] = [];
    for (let i = 0; i < 6; i++) fresh.push((await createdWorkflow(db.pool)).id);
    const [x, y] = await Promise.all([claim(db.pool, "x", 3), claim(db.pool, "y", 3)]);
    const xs = x.map((w) => w.id);
    const ys = y.map((w) => w.id);
    t.deepEqual(
      xs.filter((id) => ys.includes(id)),
      [],
      `round ${round}`,
    );
    const tokens = new Set([...x, ...y].map((w) => w.lease_token));
    t.is(tokens.size, x.length + y.length);
  }
});

test.serial("a due waiting_retry workflow is claimed back to running; one not yet due is not", async (t) => {
  const w = await claimedWorkflow();
  const parked = await fire(w.id, w.lease_token, "schedule_retry", {
    next_attempt_at: new Date(Date.now() + 3_600_000).toISOString(),
    last_error_code: "crm_timeout",
  });
  t.like(parked, {
    state: "waiting_retry",
    lease_token: null,
    locked_by: null,
    last_error_code: "crm_timeout",
  });
  t.false((await claim(db.pool, "w")).some((x) => x.id === w.id));

  await db.pool.query(
    "update bitrix_sync.workflow_instances set next_attempt_at = now() - interval '1 second' where id = $1",
    [w.id],
  );
  const again = (await claim(db.pool, "w2")).find((x) => x.id === w.id);
  t.like(again, { state: "running", locked_by: "w2", attempt_count: 2 });
  t.not(again?.lease_token, w.lease_token);
});

test.serial("waiting_crm and waiting_manual workflows are not claimed", async (t) => {
  const w1 = await claimedWorkflow();
  await fire(w1.id, w1.lease_token, "await_crm");
  const w2 = await claimedWorkflow();
  await fire(w2.id, w2.lease_token, "need_manual", { last_error_code: "invalid_phone" });
  const claimed = (await claim(db.pool, "w")).map((w) => w.id);
  t.false(claimed.includes(w1.id));
  t.false(claimed.includes(w2.id));
});

test.serial(
  "an expired lease is reclaimed with a new token and the old holder is refused (BS001)",
  async (t) => {
    const w = await claimedWorkflow();
    await db.pool.query(
      "update bitrix_sync.workflow_instances set locked_until = now() - interval '1 second' where id = $1",
      [w.id],
    );
    const again = (await claim(db.pool, "w-new")).find((x) => x.id === w.id);
    t.truthy(again);
    t.like(again, { state: "running", locked_by: "w-new", attempt_count: 2 });
    t.not(again?.lease_token, w.lease_token);

    const err = await rejectsWith(t, fire(w.id, w.lease_token, "succeed", { outcome: "created" }), "BS001");
    t.truthy(err.hint);
    await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.extend_workflow_lease($1, $2, '1 minute')", [w.id, w.lease_token]),
      "BS001",
    );
    t.like(await get(w.id), { state: "running", lease_token: again?.lease_token });
    t.like(await fire(w.id, again?.lease_token ?? null, "succeed", { outcome: "created" }), {
      state: "succeeded",
    });
  },
);

// Every workflow edge of bitrix_sync.state_edges, fired from its from-state by the lease holder.
test("every legal workflow event moves the workflow along its edge", async (t) => {
  const { rows: edges } = await db.pool.query<{ from_state: string; to_state: string; event: string }>(
    "select from_state, to_state, event from bitrix_sync.state_edges where machine = 'workflow' order by 1, 3",
  );
  t.true(edges.length >= 17);
  for (const e of edges) {
    // Only running workflows hold a lease (claim_workflows gives it); waiting ones have none.
    const { id, token } = await workflowIn(db.pool, e.from_state);
    const out = await fire(id, token, e.event, { current_step: `after_${e.event}` });
    const label = `${e.from_state} --${e.event}--> ${e.to_state}`;
    t.is(out.state, e.to_state, label);
    t.is(out.current_step, `after_${e.event}`, label);
    if (e.to_state === "running") {
      t.is(out.lease_token, token, `${label}: the holder keeps its lease`);
    } else {
      t.is(out.lease_token, null, `${label}: lease released`);
      t.is(out.locked_by, null, label);
      t.is(out.locked_until, null, label);
    }
    t.is(out.finished_at !== null, TERMINAL.includes(e.to_state), `${label}: finished_at`);
  }
});

test("fire_workflow_event applies the allowed changes", async (t) => {
  const { id, token } = await runningWorkflow(db.pool);
  const out = await fire(id, token, "succeed", {
    current_step: "write_back",
    step_data: { candidates: ["11", "12"] },
    contact_id: "12",
    outcome: "mapped_existing",
    processed_revision: 1,
  });
  t.like(out, {
    state: "succeeded",
    current_step: "write_back",
    step_data: { candidates: ["11", "12"] },
    contact_id: "12",
    outcome: "mapped_existing",
    processed_revision: 1,
  });
  t.truthy(out.finished_at);
});

test("an event that is not an edge of the current state raises BS002", async (t) => {
  const cases: Array<[string, string]> = [
    ["created", "succeed"],
    ["created", "crm_replied"],
    ["running", "crm_replied"],
    ["running", "start"],
    ["waiting_crm", "succeed"],
    ["waiting_retry", "await_crm"],
    ["waiting_manual", "schedule_retry"],
    ["succeeded", "cancel"],
    ["failed", "manual_resume"],
    ["cancelled", "start"],
    ["running", "no_such_event"],
  ];
  for (const [state, event] of cases) {
    const { id, token } = await workflowIn(db.pool, state);
    const err = await rejectsWith(t, fire(id, token, event), "BS002");
    t.true(err.message.includes(event), err.message);
    t.is((await get(id)).state, state, `${state} + ${event} changed nothing`);
  }
});

test("a stale or missing lease token raises BS001 and changes nothing", async (t) => {
  const { id, token } = await runningWorkflow(db.pool);
  await rejectsWith(t, fire(id, randomUUID(), "succeed"), "BS001");
  await rejectsWith(t, fire(id, null, "succeed"), "BS001");
  // A created workflow holds no lease: presenting one is stale too.
  const other = await createdWorkflow(db.pool);
  await rejectsWith(t, fire(other.id, randomUUID(), "start"), "BS001");
  t.like(await get(id), { state: "running", lease_token: token });
});

test("an unknown workflow id raises BS005", async (t) => {
  await rejectsWith(t, fire(randomUUID(), null, "start"), "BS005");
});

test("changes outside the allowed keys, or raw error text, raise BS004 and change nothing", async (t) => {
  const { id } = await createdWorkflow(db.pool);
  for (const changes of [
    { state: "succeeded" },
    { lease_token: randomUUID() },
    { user_id: randomUUID() },
    { revision: 9, current_step: "x" },
    { last_error_code: "Connection refused by 10.0.0.1: phone +79990001122" },
    { outcome: "Created Contact" },
  ]) {
    await rejectsWith(t, fire(id, null, "start", changes), "BS004");
  }
  t.like(await get(id), { state: "created", current_step: "start", revision: 1 });
});

test("a hand-written UPDATE that skips an edge is refused by the guard trigger (BS002)", async (t) => {
  const { id } = await createdWorkflow(db.pool);
  const update = (state: string, extra = "") =>
    db.pool.query(`update bitrix_sync.workflow_instances set state = $2${extra} where id = $1`, [id, state]);

  const err = await rejectsWith(t, update("succeeded", ", finished_at = now()"), "BS002");
  t.regex(err.message, /illegal workflow transition created -> succeeded/);
  t.truthy(err.hint);
  await rejectsWith(t, update("waiting_crm"), "BS002");
  await rejectsWith(t, update("bogus"), "BS002");
  t.is((await get(id)).state, "created");

  // An edge of the diagram passes the guard even when written by hand.
  await update("running");
  t.is((await get(id)).state, "running");
  await rejectsWith(t, update("created"), "BS002");
  // Finished is final.
  await update("cancelled", ", finished_at = now()");
  await rejectsWith(t, update("running", ", finished_at = null"), "BS002");
});

test("a transaction that fails leaves the workflow as it was", async (t) => {
  const w = await createdWorkflow(db.pool);
  await t.throwsAsync(
    inTransaction(db.pool, async (c) => {
      await c.query("select bitrix_sync.fire_workflow_event($1, null, 'start', '{}')", [w.id]);
      throw new Error("worker crashed before commit");
    }),
  );
  t.is((await get(w.id)).state, "created");
});

/** A new workflow put straight into running under a fresh token (no claim: safe for concurrent tests). */
async function held(): Promise<{ id: string; token: string }> {
  const { workflow_id: id } = await start(db.pool, randomUUID());
  const token = randomUUID();
  await forceRow(db.pool, "bitrix_sync.workflow_instances", id, {
    state: "running",
    lease_token: token,
    locked_by: "w",
    locked_until: new Date(Date.now() + 60_000),
  });
  return { id, token };
}

const save = (id: string, token: string | null, data: unknown, step: string | null = null) =>
  one<WorkflowRow>(db.pool, "select * from bitrix_sync.save_workflow_step($1, $2, $3, $4)", [
    id,
    token,
    JSON.stringify(data),
    step,
  ]);

test("save_workflow_step stores the step state under the lease without a state change", async (t) => {
  const w = await held();
  t.like(await save(w.id, w.token, { pass: 1, contact: 42 }), {
    state: "running",
    current_step: "start",
    step_data: { pass: 1, contact: 42 },
    lease_token: w.token,
  });
  t.like(await save(w.id, w.token, { pass: 2 }, "find_by_phone"), {
    current_step: "find_by_phone",
    step_data: { pass: 2 },
  });
});

test("save_workflow_step refuses a stale token, a workflow not running, and bad arguments", async (t) => {
  const w = await held();
  await rejectsWith(t, save(w.id, randomUUID(), { pass: 1 }), "BS001");
  await rejectsWith(t, save(w.id, null, { pass: 1 }), "BS001");
  await rejectsWith(t, save(w.id, w.token, ["not", "an", "object"]), "BS004");
  const err = await rejectsWith(t, save(w.id, w.token, {}, "Find By Phone +79990001122"), "BS004");
  t.truthy(err.hint);
  await fire(w.id, w.token, "succeed", { outcome: "mapped" });
  await rejectsWith(t, save(w.id, w.token, { pass: 9 }), "BS001");
  t.like(await get(w.id), { state: "succeeded", step_data: {} });
});

const retry = (id: string, token: string | null, delay: string, code = "step_failed") =>
  one<WorkflowRow & { deadline_at: Date; due_ok: boolean }>(
    db.pool,
    `select w.*, w.next_attempt_at between now() + $4::interval - interval '1 second'
                                     and now() + $4::interval + interval '1 second' as due_ok
       from bitrix_sync.schedule_workflow_retry($1, $2, $3, $4::interval) w`,
    [id, token, code, delay],
  );

const workflowDeadLetters = async (id: string) =>
  (
    await db.pool.query(
      "select source, source_id, operation, error_code, attempt_count, first_attempt_at, deadline_at, correlation_id from bitrix_sync.technical_dead_letters where workflow_id = $1",
      [id],
    )
  ).rows;

test("schedule_workflow_retry parks a failed step in waiting_retry until the delay has passed", async (t) => {
  const w = await held();
  const out = await retry(w.id, w.token, "90 seconds");
  t.like(out, {
    state: "waiting_retry",
    last_error_code: "step_failed",
    lease_token: null,
    finished_at: null,
    due_ok: true,
  });
  t.deepEqual(await workflowDeadLetters(w.id), []);
  await rejectsWith(t, retry(w.id, w.token, "1 second"), "BS001");
});

test("schedule_workflow_retry past the horizon fails the workflow with retry_horizon_exceeded and a DLQ row", async (t) => {
  const w = await held();
  // Created 23 h 59 min 30 s ago: a one-minute back-off would land past the 24 h horizon.
  const created = new Date(Date.now() - 86_400_000 + 30_000);
  await forceRow(db.pool, "bitrix_sync.workflow_instances", w.id, { created_at: created });
  const out = await retry(w.id, w.token, "1 minute");
  t.like(out, {
    state: "failed",
    outcome: "failed",
    last_error_code: "retry_horizon_exceeded",
    lease_token: null,
  });
  t.truthy(out.finished_at);
  const deadline = new Date(created.getTime() + 86_400_000);
  t.deepEqual(out.deadline_at, deadline);
  const wf = await one<{ correlation_id: string; workflow_type: string }>(
    db.pool,
    "select correlation_id, workflow_type from bitrix_sync.workflow_instances where id = $1",
    [w.id],
  );
  t.deepEqual(await workflowDeadLetters(w.id), [
    {
      source: "workflow",
      source_id: w.id,
      operation: wf.workflow_type,
      error_code: "retry_horizon_exceeded",
      attempt_count: 0,
      first_attempt_at: created,
      deadline_at: deadline,
      correlation_id: wf.correlation_id,
    },
  ]);
});

test("schedule_workflow_retry refuses raw error text (BS004) and a stale token (BS001)", async (t) => {
  const w = await held();
  await rejectsWith(t, retry(w.id, w.token, "1 second", "Timeout talking to +79990001122"), "BS004");
  await rejectsWith(t, retry(w.id, randomUUID(), "1 second"), "BS001");
  t.like(await get(w.id), { state: "running", lease_token: w.token });
});
