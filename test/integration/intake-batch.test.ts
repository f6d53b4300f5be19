// Intake of a claimed batch in one call (take_sync_tasks, issue 14): the same outcome as one
// intent per transaction, fenced by every lease token, and all or nothing.
import { randomUUID } from "node:crypto";
import test from "ava";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { rejectsWith } from "../helpers/sql-core.js";
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
