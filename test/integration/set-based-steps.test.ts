// issue_commands(), fire_workflow_events() and open_mappings() (migration 000049, issue 36;
// sql/commands/issue_many.sql, sql/workflows/events_many.sql, sql/mapping/links_many.sql): the issues,
// the transitions and the new links of a group of steps, each in one call.
// Each must leave what the same single calls in one transaction leave, refuse what they refuse, all
// or nothing, and be what the step lane sends for a group (the statement batcher's set form).
import { randomUUID } from "node:crypto";
import test, { type ExecutionContext } from "ava";
import type pg from "pg";
import { StatementBatcher, setFormOf } from "../../src/db/statement-batcher.js";
import { FIRE_WORKFLOW_EVENT, ISSUE_COMMAND, OPEN_MAPPING } from "../../src/workflows/step/core.js";
import { runningWorkflow } from "../helpers/builders.js";
import { rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/** The arguments of one issue, in issue_command()'s order. */
function issueArgs(wf: { id: string; token: string }, i: number): unknown[] {
  return [
    wf.id,
    wf.token,
    i % 2 === 0 ? "contact.find_by_phone" : "contact.add",
    i === 3 ? null : JSON.stringify({ phone_hash: `h${i}`, n: i }),
    i === 2 ? null : `step_${i}`,
    i === 1 ? TRACEPARENT : i === 4 ? "not-a-traceparent" : null,
    i === 0 ? null : JSON.stringify({ pass: 1, i }),
  ];
}

/** issue_commands() with issue_command()'s argument lists, as the batcher's set form passes them. */
function issueMany(c: pg.Pool | pg.PoolClient, calls: unknown[][]) {
  const col = (k: number) => calls.map((a) => a[k] ?? null);
  return c.query<{ ord: number; command: string }>(
    `select ord, (command).id, (command).workflow_id from bitrix_sync.issue_commands(
       $1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::jsonb[])`,
    [col(0), col(1), col(2), col(3), col(4), col(5), col(6)],
  );
}

/** What an issue leaves: the workflow's row and its command, without ids and times. */
async function leftBy(workflowId: string) {
  const { rows: w } = await db.pool.query(
    `select state, current_step, step_data, lease_token, locked_by, locked_until, attempt_count,
            next_attempt_at = updated_at as next_is_now
       from bitrix_sync.workflow_instances where id = $1`,
    [workflowId],
  );
  const { rows: c } = await db.pool.query(
    `select c.command_type, c.params, c.status, c.trace_context, c.attempt_count,
            c.revision = w.revision as same_revision, c.correlation_id = w.correlation_id as same_correlation
       from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
      where c.workflow_id = $1`,
    [workflowId],
  );
  return { workflow: w, commands: c };
}

/**
 * Sends `calls` of `text` through one batcher in one committed transaction, as a step group does, and
 * checks they went as one call of its set form: one statement for all, each caller with one row under
 * the column the original statement names, holding the id it passed (`idOf`).
 */
async function throughSetForm(
  t: ExecutionContext,
  text: string,
  column: string,
  calls: unknown[][],
): Promise<void> {
  t.truthy(setFormOf(text));
  const c = await db.pool.connect();
  try {
    await c.query("begin");
    const b = new StatementBatcher(c);
    const results = await Promise.all(calls.map((args) => b.client().query(text, args)));
    await c.query("commit");
    t.like(b.stats, { statements: 1, setForms: 1, grouped: calls.length });
    for (const [i, r] of results.entries()) {
      t.is(r.rowCount, 1);
      t.deepEqual(
        r.fields.map((f) => f.name),
        [column],
      );
      t.regex(String(r.rows[0]?.[column]), new RegExp(String(calls[i]?.[0])));
    }
  } finally {
    c.release();
  }
}

test("a group's issue in one call leaves what the same issue_command() calls leave", async (t) => {
  const one = await Promise.all([0, 1, 2, 3, 4].map(() => runningWorkflow(db.pool)));
  const many = await Promise.all([0, 1, 2, 3, 4].map(() => runningWorkflow(db.pool)));
  for (const [i, wf] of one.entries()) {
    await db.pool.query("select bitrix_sync.issue_command($1, $2, $3, $4, $5, $6, $7)", issueArgs(wf, i));
  }
  const { rows } = await issueMany(
    db.pool,
    many.map((wf, i) => issueArgs(wf, i)),
  );
  // (ord, command) in the caller's order; the command ids rise with it.
  t.deepEqual(
    rows.map((r) => [r.ord, (r as unknown as { workflow_id: string }).workflow_id]),
    many.map((wf, i) => [i + 1, wf.id]),
  );
  const ids = rows.map((r) => Number((r as unknown as { id: string }).id));
  t.deepEqual(
    ids,
    [...ids].sort((a, b) => a - b),
  );
  for (const i of [0, 1, 2, 3, 4]) {
    const a = await leftBy((one[i] as { id: string }).id);
    const b = await leftBy((many[i] as { id: string }).id);
    t.deepEqual(b, a, `issue ${i}`);
    t.is(b.commands.length, 1);
    t.like(b.workflow[0], { state: "waiting_crm", lease_token: null, next_is_now: true });
  }
  // The malformed traceparent is dropped, the well-formed one kept, as issue_command() does.
  t.is((await leftBy((many[1] as { id: string }).id)).commands[0].trace_context, TRACEPARENT);
  t.is((await leftBy((many[4] as { id: string }).id)).commands[0].trace_context, null);
});

test("one stale lease refuses the whole call, naming the first workflow not held", async (t) => {
  const wfs = await Promise.all([0, 1, 2].map(() => runningWorkflow(db.pool)));
  const stale = { id: (wfs[1] as { id: string }).id, token: randomUUID() };
  const err = await rejectsWith(
    t,
    issueMany(db.pool, [issueArgs(wfs[0] as never, 0), issueArgs(stale, 1), issueArgs(wfs[2] as never, 2)]),
    "BS001",
  );
  t.regex(String(err?.message), new RegExp(stale.id));
  // Nothing of the group was kept.
  for (const wf of wfs) {
    const left = await leftBy(wf.id);
    t.is(left.workflow[0].state, "running");
    t.is(left.commands.length, 0);
  }
  // A workflow that is not running any more (its issue already persisted) is refused the same way.
  await issueMany(db.pool, [issueArgs(wfs[0] as never, 0)]);
  await rejectsWith(
    t,
    issueMany(db.pool, [issueArgs(wfs[2] as never, 2), issueArgs(wfs[0] as never, 0)]),
    "BS001",
  );
  t.is((await leftBy((wfs[2] as { id: string }).id)).commands.length, 0);
  // An unknown workflow too.
  await rejectsWith(
    t,
    issueMany(db.pool, [issueArgs({ id: randomUUID(), token: randomUUID() }, 0)]),
    "BS001",
  );
});

test("a workflow named twice is refused (its second issue would find it waiting)", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const err = await rejectsWith(t, issueMany(db.pool, [issueArgs(wf, 0), issueArgs(wf, 1)]), "BS001");
  t.regex(String(err?.message), new RegExp(wf.id));
  t.is((await leftBy(wf.id)).commands.length, 0);
});

test("malformed arguments are refused with BS004, and an empty group does nothing", async (t) => {
  const wf = await runningWorkflow(db.pool);
  await rejectsWith(
    t,
    db.pool.query(
      `select * from bitrix_sync.issue_commands($1::uuid[], $2::uuid[], array['contact.read'], array['{}'::jsonb],
         array['read_contact'], array[null::text], array[null::jsonb])`,
      [[wf.id], [wf.token, wf.token]],
    ),
    "BS004",
  );
  const notObject = issueArgs(wf, 1);
  notObject[6] = "[1]";
  await rejectsWith(t, issueMany(db.pool, [notObject]), "BS004");
  t.is((await leftBy(wf.id)).workflow[0].state, "running");
  const { rows } = await issueMany(db.pool, []);
  t.is(rows.length, 0);
});

test("the step lane's issue goes as one call of issue_commands() for a group (the batcher's set form)", async (t) => {
  const wfs = await Promise.all([0, 1, 2, 3].map(() => runningWorkflow(db.pool)));
  await throughSetForm(
    t,
    ISSUE_COMMAND,
    "issue_command",
    wfs.map((wf, i) => issueArgs(wf, i)),
  );
  for (const wf of wfs) {
    const left = await leftBy(wf.id);
    t.is(left.workflow[0].state, "waiting_crm");
    t.is(left.commands.length, 1);
  }
});

// ---------------------------------------------------------------------------------------------
// fire_workflow_events

/** Events a step fires from running, with the changes the step code passes. */
const EVENTS: Array<[string, Record<string, unknown>]> = [
  ["succeed", { step_data: { pass: 2, contact: 7 }, outcome: "linked", processed_revision: 1 }],
  ["need_manual", { step_data: { pass: 1 }, last_error_code: "ambiguous_match", current_step: "manual" }],
  ["fail", { step_data: { pass: 1 }, last_error_code: "crm_timeout", outcome: "failed" }],
  ["await_crm", { step_data: { pass: 1 }, current_step: "find_by_phone" }],
  ["schedule_retry", { step_data: { pass: 3 }, next_attempt_at: "2031-01-01T00:00:00Z", contact_id: "42" }],
  ["succeed", {}],
];

function fireMany(c: pg.Pool | pg.PoolClient, calls: unknown[][]) {
  const col = (k: number) => calls.map((a) => a[k] ?? null);
  return c.query<{ ord: number; id: string; state: string }>(
    `select ord, (workflow).id, (workflow).state
       from bitrix_sync.fire_workflow_events($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[])`,
    [col(0), col(1), col(2), col(3)],
  );
}

/** What an event leaves on the workflow, without ids; times as whether they were set now. */
async function workflowLeft(id: string) {
  const { rows } = await db.pool.query(
    `select state, current_step, step_data, contact_id, outcome, last_error_code, processed_revision,
            lease_token is null as released, locked_by is null as unlocked, locked_until is null as no_until,
            finished_at is not null as finished, next_attempt_at = updated_at as next_is_now,
            next_attempt_at = '2031-01-01T00:00:00Z' as next_is_asked
       from bitrix_sync.workflow_instances where id = $1`,
    [id],
  );
  return rows[0];
}

test("a group's transitions in one call leave what the same fire_workflow_event() calls leave", async (t) => {
  const one = await Promise.all(EVENTS.map(() => runningWorkflow(db.pool)));
  const many = await Promise.all(EVENTS.map(() => runningWorkflow(db.pool)));
  for (const [i, wf] of one.entries()) {
    const [event, changes] = EVENTS[i] as [string, Record<string, unknown>];
    await db.pool.query(FIRE_WORKFLOW_EVENT, [wf.id, wf.token, event, JSON.stringify(changes)]);
  }
  const { rows } = await fireMany(
    db.pool,
    many.map((wf, i) => [wf.id, wf.token, EVENTS[i]?.[0], JSON.stringify(EVENTS[i]?.[1])]),
  );
  t.deepEqual(
    rows.map((r) => [r.ord, r.id]),
    many.map((wf, i) => [i + 1, wf.id]),
  );
  for (const i of EVENTS.keys()) {
    t.deepEqual(
      await workflowLeft((many[i] as { id: string }).id),
      await workflowLeft((one[i] as { id: string }).id),
      `event ${i}`,
    );
  }
  // A transition back to running keeps its lease; the others release it.
  t.like(await workflowLeft((many[0] as { id: string }).id), {
    state: "succeeded",
    released: true,
    finished: true,
  });
});

test("the first refusal is the one the calls one after the other would raise; nothing of the group is kept", async (t) => {
  const wfs = await Promise.all([0, 1, 2].map(() => runningWorkflow(db.pool)));
  const ok = (wf: { id: string; token: string }) => [
    wf.id,
    wf.token,
    "succeed",
    JSON.stringify({ outcome: "linked" }),
  ];
  const [a, b, c] = wfs as [
    { id: string; token: string },
    { id: string; token: string },
    { id: string; token: string },
  ];
  const cases: Array<[string, unknown[][], RegExp]> = [
    ["BS005", [ok(a), [randomUUID(), randomUUID(), "succeed", "{}"]], /does not exist/],
    [
      "BS001",
      [ok(a), [b.id, randomUUID(), "succeed", "{}"], [c.id, c.token, "nope", "{}"]],
      new RegExp(b.id),
    ],
    [
      "BS002",
      [ok(a), [b.id, b.token, "crm_replied", "{}"], [c.id, randomUUID(), "succeed", "{}"]],
      /not allowed in state running/,
    ],
    ["BS004", [ok(a), [b.id, b.token, "succeed", JSON.stringify({ state: "x" })]], /cannot change state/],
    [
      "BS004",
      [ok(a), [b.id, b.token, "fail", JSON.stringify({ last_error_code: "Raw Error Text" })]],
      /error code/,
    ],
    ["BS004", [ok(a), ok(a)], /named twice/],
  ];
  for (const [code, calls, message] of cases) {
    const err = await rejectsWith(t, fireMany(db.pool, calls), code);
    t.regex(String(err.message), message, code);
  }
  for (const wf of wfs) t.like(await workflowLeft(wf.id), { state: "running", released: false });
  await rejectsWith(
    t,
    db.pool.query(
      "select * from bitrix_sync.fire_workflow_events($1::uuid[], $2::uuid[], array['succeed'], array[null::jsonb])",
      [[a.id], [a.token, a.token]],
    ),
    "BS004",
  );
  t.is((await fireMany(db.pool, [])).rows.length, 0);
});

test("the step lane's transitions go as one call of fire_workflow_events() for a group", async (t) => {
  const wfs = await Promise.all([0, 1, 2].map(() => runningWorkflow(db.pool)));
  await throughSetForm(
    t,
    FIRE_WORKFLOW_EVENT,
    "fire_workflow_event",
    wfs.map((wf) => [wf.id, wf.token, "succeed", JSON.stringify({ outcome: "linked" })]),
  );
  for (const wf of wfs) t.like(await workflowLeft(wf.id), { state: "succeeded", outcome: "linked" });
});

// ---------------------------------------------------------------------------------------------
// open_mappings

let contactSeq = 7_000_000;
const nextContact = () => String(contactSeq++);

function openMany(c: pg.Pool | pg.PoolClient, calls: Array<[string, string, string | null]>) {
  return c.query<{ ord: number; entity_id: string; external_id: string }>(
    `select ord, (mapping).entity_id, (mapping).external_id
       from bitrix_sync.open_mappings($1::uuid[], $2::text[], $3::uuid[])`,
    [calls.map((x) => x[0]), calls.map((x) => x[1]), calls.map((x) => x[2])],
  );
}

/** What a link leaves: the mapping, and the extra reads of its Contact queued in the inbox. */
async function linkLeft(userId: string, contactId: string) {
  const { rows: m } = await db.pool.query(
    `select status, external_system, entity_type, external_entity_type, workflow_id is not null as has_workflow,
            closed_at, held_at, (select count(*)::int from bitrix_sync.audit_marks a where a.mapping_id = m.id) as marks
       from bitrix_sync.entity_external_mapping m where entity_id = $1 and external_id = $2`,
    [userId, contactId],
  );
  const { rows: q } = await db.pool.query(
    `select event_type, status from bitrix_sync.webhook_inbox
      where entity_id = $1 and event_type = 'linked' order by id`,
    [contactId],
  );
  return { mappings: m, linked: q };
}

test("a group's links in one call leave what the same open_mapping() calls leave, extra reads included", async (t) => {
  // Four links each way; the second Contact of each has a robot call not yet processed, the third
  // one answered unknown_mapping after its workflow began: each gets one more read queued.
  // A fourth Contact had a link that closed before its new workflow began, and a call answered
  // unknown_mapping between the two (an edit while it had no link): one more read too.
  const setUp = async () => {
    const wfs = await Promise.all([0, 1, 2, 3].map(() => runningWorkflow(db.pool)));
    const links = wfs.map((wf) => [randomUUID(), nextContact(), wf.id] as [string, string, string]);
    await db.pool.query(
      "insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id) values ('contact', 3, $1)",
      [links[1]?.[1]],
    );
    // An answered call, put in place as the processor leaves it (its guards skipped, as forceRow does).
    const c = await db.pool.connect();
    try {
      await c.query("begin");
      await c.query("set local session_replication_role = replica");
      await c.query(
        `insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, status, outcome, processed_at)
         values ('contact', 3, $1, 'processed', 'unknown_mapping', now())`,
        [links[2]?.[1]],
      );
      const [, unlinked, workflowId] = links[3] as [string, string, string];
      const { rows: closed } = await c.query<{ id: string }>(
        "select (bitrix_sync.open_mapping($1, $2, null)).id",
        [randomUUID(), unlinked],
      );
      await c.query(
        `update bitrix_sync.entity_external_mapping
            set status = 'closed', close_reason = 'deactivated',
                closed_at = (select created_at from bitrix_sync.workflow_instances where id = $2) - interval '2 seconds'
          where id = $1`,
        [closed[0]?.id, workflowId],
      );
      await c.query(
        `insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, status, outcome, processed_at, received_at)
         select 'contact', 3, $1, 'processed', 'unknown_mapping', now(), created_at - interval '1 second'
           from bitrix_sync.workflow_instances where id = $2`,
        [unlinked, workflowId],
      );
      await c.query("commit");
    } finally {
      c.release();
    }
    return links;
  };
  const one = await setUp();
  const many = await setUp();
  for (const l of one) await db.pool.query(OPEN_MAPPING, l);
  const { rows } = await openMany(db.pool, many);
  t.deepEqual(
    rows.map((r) => [r.ord, r.entity_id, r.external_id]),
    many.map((l, i) => [i + 1, l[0], l[1]]),
  );
  for (const i of [0, 1, 2, 3]) {
    const [u1, c1] = one[i] as [string, string, string];
    const [u2, c2] = many[i] as [string, string, string];
    const a = await linkLeft(u1, c1);
    t.deepEqual(await linkLeft(u2, c2), a, `link ${i}`);
    t.is(a.mappings.length, 1);
    t.is(a.linked.length, i === 0 ? 0 : 1, `link ${i}: extra read`);
  }
});

test("a second active link, in the table or within the group, refuses the whole call (BS006)", async (t) => {
  const taken = nextContact();
  const holder = randomUUID();
  await db.pool.query(OPEN_MAPPING, [holder, taken, null]);
  const free: [string, string, null] = [randomUUID(), nextContact(), null];
  await rejectsWith(t, openMany(db.pool, [free, [randomUUID(), taken, null]]), "BS006");
  await rejectsWith(t, openMany(db.pool, [free, [holder, nextContact(), null]]), "BS006");
  const twice = nextContact();
  await rejectsWith(
    t,
    openMany(db.pool, [free, [randomUUID(), twice, null], [randomUUID(), twice, null]]),
    "BS006",
  );
  t.is((await linkLeft(free[0], free[1])).mappings.length, 0, "nothing of the group is kept");
  await rejectsWith(
    t,
    db.pool.query("select * from bitrix_sync.open_mappings($1::uuid[], $2::text[], $3::uuid[])", [
      [randomUUID()],
      [],
      [null],
    ]),
    "BS004",
  );
  t.is((await openMany(db.pool, [])).rows.length, 0);
});

test("the step lane's links go as one call of open_mappings() for a group", async (t) => {
  const links = [0, 1, 2].map(() => [randomUUID(), nextContact(), null] as [string, string, null]);
  await throughSetForm(t, OPEN_MAPPING, "open_mapping", links);
  for (const [u, contact] of links) t.is((await linkLeft(u, contact)).mappings[0]?.status, "active");
});
