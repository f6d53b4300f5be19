// Intake of a claimed batch in one call (take_sync_tasks, issue 14): the same outcome as one
// intent per transaction, fenced by every lease token, and all or nothing. Its set path (issue 36,
// fifth round: one statement starts the intents of users the batch names once and who have no active
// workflow) decides every situation as start_or_join_workflow() does, and a user whose workflow
// another intake is starting is joined once that intake commits.
import { randomUUID } from "node:crypto";
import test from "ava";
import type pg from "pg";
import { createdWorkflow } from "../helpers/builders.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

interface Claimed {
  id: string;
  lease_token: string;
  entity_id: string;
  task_type: string;
}

async function claimAll(): Promise<Claimed[]> {
  const { rows } = await db.pool.query<Claimed>(
    "select id, lease_token, entity_id, task_type from bitrix_sync.claim_sync_tasks('batch-test', 1000, interval '60 seconds')",
  );
  return rows;
}

function take(rows: Claimed[], tokens = rows.map((r) => r.lease_token)) {
  return db.pool.query<{ task_id: string; workflow_id: string | null; action: string }>(
    "select task_id, workflow_id, action from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
    [
      rows.map((r) => r.id),
      tokens,
      rows.map((r) => r.entity_id),
      rows.map((r) => r.task_type),
      rows.map((r) => `hash-${r.id}`),
      rows.map(() => null),
    ],
  );
}

const statusOf = async (ids: string[]) =>
  (
    await db.pool.query<{ status: string }>(
      "select status from han_app.sync_queue where id = any($1) order by id",
      [ids],
    )
  ).rows.map((r) => r.status);

const workflowsOf = async (users: string[]) =>
  (
    await db.pool.query<{ n: number }>(
      "select count(*)::int as n from bitrix_sync.workflow_instances where user_id = any($1::uuid[])",
      [users],
    )
  ).rows[0]?.n;

test.serial(
  "a batch starts one workflow per user, joins a later intent, and completes every row",
  async (t) => {
    const users = [await makeUser(db.pool), await makeUser(db.pool), await makeUser(db.pool)];
    const first = await claimAll();
    t.is(first.length, 3);
    const { rows } = await take(first);
    t.deepEqual(
      rows.map((r) => r.action),
      ["started", "started", "started"],
    );
    t.deepEqual(
      rows.map((r) => r.task_id),
      first.map((r) => r.id),
      "one row per intent, in the order given",
    );
    t.deepEqual(await statusOf(first.map((r) => r.id)), ["processed", "processed", "processed"]);
    t.is(await workflowsOf(users.map((u) => u.id)), 3);

    // A phone change of a user whose workflow is still active joins it.
    const u0 = users[0]?.id;
    await db.pool.query(
      "update han_app.user_identity set phone_number = $2, updated_at = now() where id = $1",
      [u0, randomPhone()],
    );
    const second = await claimAll();
    t.is(second.length, 1);
    const joined = await take(second);
    t.is(joined.rows[0]?.action, "joined");
    t.is(joined.rows[0]?.workflow_id, rows[0]?.workflow_id);
    t.is(await workflowsOf(users.map((u) => u.id)), 3);
  },
);

test.serial("a stale lease token refuses the whole batch: nothing is started or completed", async (t) => {
  const users = [await makeUser(db.pool), await makeUser(db.pool)];
  const claimed = await claimAll();
  t.is(claimed.length, 2);
  const tokens = claimed.map((r) => r.lease_token);
  tokens[1] = randomUUID();
  const err = await rejectsWith(t, take(claimed, tokens), "BS001");
  // The batch is completed in one statement after the workflows start (000047); the refusal still
  // names the intent whose token was stale, not the first of the batch.
  t.regex(err.message, new RegExp(`sync task ${claimed[1]?.id} is not held`));
  t.deepEqual(await statusOf(claimed.map((r) => r.id)), ["leased", "leased"]);
  t.is(await workflowsOf(users.map((u) => u.id)), 0, "the first intent's workflow was rolled back too");
  // The same batch with the right tokens is taken.
  const { rows } = await take(claimed);
  t.deepEqual(
    rows.map((r) => r.action),
    ["started", "started"],
  );
});

test.serial("arrays of different lengths are refused with BS004", async (t) => {
  await rejectsWith(
    t,
    db.pool.query(
      "select * from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
      [[randomUUID()], [], [randomUUID()], ["contact.update"], ["h"], [null]],
    ),
    "BS004",
  );
});

/**
 * One user's situation before the intake, and the intents of the batch for that user in claim order
 * (intent type, content hash). Every kind start_or_join_workflow() tells apart.
 */
interface Situation {
  name: string;
  before: Array<{ type: string; hash: string | null; state?: "succeeded" | "failed" }>;
  intents: Array<[string, string | null]>;
}

const SITUATIONS: Situation[] = [
  { name: "new user", before: [], intents: [["contact.map_or_create", "h1"]] },
  {
    name: "last workflow succeeded, same intent and content",
    before: [{ type: "contact.update", hash: "h1", state: "succeeded" }],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "last workflow succeeded, other content",
    before: [{ type: "contact.update", hash: "h0", state: "succeeded" }],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "last workflow succeeded, other intent",
    before: [{ type: "contact.update", hash: "h1", state: "succeeded" }],
    intents: [["contact.deactivate", "h1"]],
  },
  {
    name: "last workflow succeeded with no content hash",
    before: [{ type: "contact.update", hash: null, state: "succeeded" }],
    intents: [["contact.update", null]],
  },
  {
    name: "an older workflow equal, the last one not",
    before: [
      { type: "contact.update", hash: "h1", state: "succeeded" },
      { type: "contact.update", hash: "h0", state: "succeeded" },
    ],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "last workflow failed, same intent and content",
    before: [{ type: "contact.update", hash: "h1", state: "failed" }],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "an active workflow, other content",
    before: [{ type: "contact.update", hash: "h0" }],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "an active workflow, same intent and content",
    before: [{ type: "contact.update", hash: "h1" }],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "an active rebind",
    before: [{ type: "contact.rebind", hash: null }],
    intents: [["contact.update", "h1"]],
  },
  {
    name: "three intents of one new user",
    before: [],
    intents: [
      ["contact.map_or_create", "h1"],
      ["contact.update", "h2"],
      ["contact.update", "h2"],
    ],
  },
];

/** A user's workflows, oldest first, as far as the intake decides them. */
const workflowsOfUser = async (userId: string) =>
  (
    await db.pool.query(
      `select workflow_type, intent_type, state, revision, content_hash, held_intent_type, held_content_hash,
              trace_context is not null as traced
         from bitrix_sync.workflow_instances where user_id = $1 order by created_at, revision`,
      [userId],
    )
  ).rows;

async function arrange(s: Situation): Promise<string> {
  const userId = randomUUID();
  for (const b of s.before) {
    const wf = await createdWorkflow(db.pool, { userId, type: b.type, contentHash: b.hash });
    if (b.state)
      await forceRow(db.pool, "bitrix_sync.workflow_instances", wf.id, {
        state: b.state,
        finished_at: new Date(),
      });
  }
  return userId;
}

test.serial(
  "the set path decides every situation as start_or_join_workflow() does one intent at a time",
  async (t) => {
    // Each situation twice: one user's intents go through one take_sync_tasks() call with all the
    // others, interleaved by position; the twin's through start_or_join_workflow() one by one.
    const batch: Array<{ user: string; type: string; hash: string | null; s: number }> = [];
    const twins: string[] = [];
    const users: string[] = [];
    for (const s of SITUATIONS) {
      users.push(await arrange(s));
      twins.push(await arrange(s));
    }
    const longest = Math.max(...SITUATIONS.map((s) => s.intents.length));
    for (let k = 0; k < longest; k++) {
      for (const [i, s] of SITUATIONS.entries()) {
        const intent = s.intents[k];
        if (intent) batch.push({ user: users[i] as string, type: intent[0], hash: intent[1], s: i });
      }
    }
    // Leased intents to present (their users are the App's; the call takes the user from its arrays).
    for (const _ of batch) await makeUser(db.pool);
    const claimed = (await claimAll()).slice(0, batch.length);
    t.is(claimed.length, batch.length);
    const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const { rows } = await db.pool.query<{ action: string; workflow_id: string | null }>(
      "select action, workflow_id from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
      [
        claimed.map((r) => r.id),
        claimed.map((r) => r.lease_token),
        batch.map((b) => b.user),
        batch.map((b) => b.type),
        batch.map((b) => b.hash),
        batch.map(() => trace),
      ],
    );
    t.deepEqual(
      await statusOf(claimed.map((r) => r.id)),
      claimed.map(() => "processed"),
    );
    for (const [i, s] of SITUATIONS.entries()) {
      const twin = twins[i] as string;
      const single: string[] = [];
      for (const [type, hash] of s.intents) {
        const r = await one<{ action: string; workflow_id: string | null }>(
          db.pool,
          "select action, workflow_id from bitrix_sync.start_or_join_workflow($1, $2, $3, $4, $5)",
          [twin, type, randomUUID(), hash, trace],
        );
        single.push(`${r.action}${r.workflow_id === null ? " (none)" : ""}`);
      }
      const mine = rows
        .filter((_, k) => batch[k]?.s === i)
        .map((r) => `${r.action}${r.workflow_id === null ? " (none)" : ""}`);
      t.deepEqual(mine, single, s.name);
      t.deepEqual(await workflowsOfUser(users[i] as string), await workflowsOfUser(twin), s.name);
    }
    // Every workflow the call returned belongs to the intent's user.
    const { rows: owners } = await db.pool.query<{ id: string; user_id: string }>(
      "select id, user_id from bitrix_sync.workflow_instances where id = any($1::uuid[])",
      [rows.map((r) => r.workflow_id).filter(Boolean)],
    );
    const ownerOf = new Map(owners.map((o) => [o.id, o.user_id]));
    rows.forEach((r, k) => {
      if (r.workflow_id) t.is(ownerOf.get(r.workflow_id), batch[k]?.user);
    });
  },
);

test.serial(
  "a user whose workflow another intake is starting: the call waits for it, then joins it",
  async (t) => {
    const userId = randomUUID();
    await makeUser(db.pool);
    const [claimed] = await claimAll();
    if (!claimed) return t.fail("nothing claimed");
    const other = await db.pool.connect();
    try {
      await other.query("begin");
      const started = await one<{ workflow_id: string; action: string }>(
        other,
        "select workflow_id, action from bitrix_sync.start_or_join_workflow($1, 'contact.map_or_create', $2, 'h1')",
        [userId, randomUUID()],
      );
      t.is(started.action, "started");
      const taking = db.pool.query<{ action: string; workflow_id: string }>(
        "select action, workflow_id from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
        [[claimed.id], [claimed.lease_token], [userId], ["contact.update"], ["h2"], [null]],
      );
      // The call waits on the other intake's uncommitted row (the one-active-per-user index).
      const waiting = await waitForWaiters(db.pool);
      t.true(waiting, "the intake waits for the other transaction");
      await other.query("commit");
      const { rows } = await taking;
      t.like(rows[0], { action: "joined", workflow_id: started.workflow_id });
      t.like((await workflowsOfUser(userId))[0], {
        revision: 2,
        intent_type: "contact.update",
        content_hash: "h2",
      });
      t.is((await workflowsOfUser(userId)).length, 1);
    } finally {
      other.release();
    }
  },
);

test.serial(
  "two intakes whose batches share users lock them in the batch's order: no deadlock",
  async (t) => {
    // Y < X, as the caller sorts a batch by user. A names Y twice (single calls) and X once (the set
    // path); B names Y once and X twice. A third transaction holds X's start, so A waits at X and B
    // meets A at Y or X. Had a call started its set-path users first (X for A, Y for B), A would
    // hold X and wait for Y while B held Y and waited for X.
    const [y, x] = [randomUUID(), randomUUID()].sort() as [string, string];
    for (let i = 0; i < 6; i++) await makeUser(db.pool);
    const claimed = await claimAll();
    t.is(claimed.length, 6);
    const call = (c: pg.PoolClient, rows: Claimed[], users: string[]) =>
      c.query<{ action: string }>(
        "select action from bitrix_sync.take_sync_tasks($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[])",
        [
          rows.map((r) => r.id),
          rows.map((r) => r.lease_token),
          users,
          users.map(() => "contact.update"),
          users.map((_, i) => `h${i}`),
          users.map(() => null),
        ],
      );
    const [holder, a, b] = [await db.pool.connect(), await db.pool.connect(), await db.pool.connect()];
    try {
      await holder.query("begin");
      await holder.query(
        "select bitrix_sync.start_or_join_workflow($1, 'contact.map_or_create', $2, 'held')",
        [x, randomUUID()],
      );
      const first = call(a, claimed.slice(0, 3), [y, y, x]);
      t.true(await waitForWaiters(db.pool), "A waits for X");
      const second = call(b, claimed.slice(3), [y, x, x]);
      t.true(await waitForWaiters(db.pool, 2), "B waits too");
      await holder.query("rollback");
      const results = await Promise.allSettled([first, second]);
      t.deepEqual(
        results.map((r) => (r.status === "fulfilled" ? "ok" : (r.reason as { code?: string }).code)),
        ["ok", "ok"],
      );
      t.deepEqual(
        (
          await db.pool.query<{ n: number }>(
            "select count(*)::int as n from bitrix_sync.workflow_instances where user_id = any($1::uuid[]) group by user_id",
            [[x, y]],
          )
        ).rows.map((r) => r.n),
        [1, 1],
        "one workflow per user",
      );
    } finally {
      for (const c of [holder, a, b]) c.release();
    }
  },
);

/** True once `n` backends of this database wait on a lock (within 10 s). */
async function waitForWaiters(pool: pg.Pool, n = 1): Promise<boolean> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await pool.query<{ n: number }>(
      "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
    );
    if ((rows[0]?.n ?? 0) >= n) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}
