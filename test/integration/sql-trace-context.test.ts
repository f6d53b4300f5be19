// Trace context across the durable queue (issue 12, sql/tracing.sql): the functions that create
// workflows, commands and inbox events store the caller's W3C traceparent, drop a malformed one
// rather than fail the write, and a joined workflow hands back the context it had.
import { randomUUID } from "node:crypto";
import test from "ava";
import { type CommandRow, runningWorkflow } from "../helpers/builders.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, inRolledBackTx, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const tp = (n: number) => `00-${n.toString(16).padStart(32, "a")}-${n.toString(16).padStart(16, "b")}-01`;
const MALFORMED = [
  "",
  "nonsense",
  tp(1).toUpperCase(),
  `ff${tp(1).slice(2)}`,
  `00-${"0".repeat(32)}-${"b".repeat(16)}-01`,
];

async function startOrJoin(userId: string, intent: string, hash: string | null, trace: string | null) {
  return one<{ workflow_id: string | null; action: string; previous_trace_context: string | null }>(
    db.pool,
    "select * from bitrix_sync.start_or_join_workflow($1, $2, $3, $4, $5)",
    [userId, intent, randomUUID(), hash, trace],
  );
}

const contextOf = async (table: string, id: string) =>
  (
    await one<{ trace_context: string | null }>(
      db.pool,
      `select trace_context from bitrix_sync.${table} where id = $1`,
      [id],
    )
  ).trace_context;

test("a started workflow keeps its intent's context; a joining intent takes over and gets the old one back", async (t) => {
  const user = randomUUID();
  const started = await startOrJoin(user, "contact.map_or_create", "a".repeat(64), tp(1));
  t.is(started.action, "started");
  t.is(started.previous_trace_context, null);
  t.is(await contextOf("workflow_instances", started.workflow_id as string), tp(1));

  const same = await startOrJoin(user, "contact.map_or_create", "a".repeat(64), tp(2));
  t.deepEqual([same.action, same.previous_trace_context], ["unchanged", tp(1)]);
  t.is(
    await contextOf("workflow_instances", started.workflow_id as string),
    tp(1),
    "an unchanged intent takes nothing over",
  );

  const joined = await startOrJoin(user, "contact.update", "b".repeat(64), tp(3));
  t.deepEqual([joined.action, joined.previous_trace_context], ["joined", tp(1)]);
  t.is(await contextOf("workflow_instances", started.workflow_id as string), tp(3));

  const untraced = await startOrJoin(user, "contact.update", "c".repeat(64), null);
  t.deepEqual([untraced.action, untraced.previous_trace_context], ["joined", tp(3)]);
  t.is(
    await contextOf("workflow_instances", started.workflow_id as string),
    tp(3),
    "an intent without context keeps the last one",
  );
});

test("a malformed context is dropped, never a reason to refuse the intent", async (t) => {
  for (const bad of MALFORMED) {
    const r = await startOrJoin(randomUUID(), "contact.map_or_create", null, bad);
    t.is(r.action, "started", bad);
    t.is(await contextOf("workflow_instances", r.workflow_id as string), null, bad);
  }
});

test("issue_command stores the issuing step's context; the call without it still works", async (t) => {
  const wf = await runningWorkflow(db.pool);
  const cmd = await one<CommandRow & { trace_context: string | null }>(
    db.pool,
    "select * from bitrix_sync.issue_command($1, $2, 'contact.read', '{}', 'read_contact', $3)",
    [wf.id, wf.token, tp(4)],
  );
  t.is(cmd.trace_context, tp(4));
  const claimed = await one<{ trace_context: string | null }>(
    db.pool,
    "select trace_context from bitrix_sync.claim_commands('t', 1000, interval '60 seconds') where id = $1",
    [cmd.id],
  );
  t.is(claimed.trace_context, tp(4), "the claim hands it to the pump in the same round trip");

  const other = await runningWorkflow(db.pool);
  const plain = await one<{ trace_context: string | null }>(
    db.pool,
    "select * from bitrix_sync.issue_command($1, $2, 'contact.read', '{}', 'read_contact')",
    [other.id, other.token],
  );
  t.is(plain.trace_context, null);
  const third = await runningWorkflow(db.pool);
  const bad = await one<{ trace_context: string | null }>(
    db.pool,
    "select * from bitrix_sync.issue_command($1, $2, 'contact.read', '{}', 'read_contact', 'x')",
    [third.id, third.token],
  );
  t.is(bad.trace_context, null);
});

test("accept_webhooks stores each request's context with its row", async (t) => {
  await inRolledBackTx(db.pool, async (c) => {
    const { rows } = await c.query<{ ord: number; inbox_id: string }>(
      "select ord, inbox_id from bitrix_sync.accept_webhooks($1, $2, $3, $4, $5) order by ord",
      [
        ["contact", "contact", "contact"],
        [3, 3, 3],
        ["11", "12", "13"],
        [null, null, null],
        [tp(5), null, "junk"],
      ],
    );
    const stored = await c.query<{ trace_context: string | null }>(
      "select trace_context from bitrix_sync.webhook_inbox where id = any($1) order by id",
      [rows.map((r) => r.inbox_id)],
    );
    t.deepEqual(
      stored.rows.map((r) => r.trace_context),
      [tp(5), null, null],
    );
  });
  await rejectsWith(
    t,
    db.pool.query("select * from bitrix_sync.accept_webhooks($1, $2, $3, $4, $5)", [
      ["contact", "contact"],
      [3, 3],
      ["1", "2"],
      [null, null],
      [tp(6)],
    ]),
    "BS004",
  );
});

test("a hand-written malformed context is refused by the table's check", async (t) => {
  const wf = await runningWorkflow(db.pool);
  await rejectsWith(
    t,
    forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, { trace_context: "nonsense" }),
    "23514",
  );
  await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, { trace_context: tp(7) });
  t.is(await contextOf("workflow_instances", wf.id), tp(7));
});
