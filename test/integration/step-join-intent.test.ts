// A step works with the intent of the revision it reads when it begins, not the one of its claim.
// Found by the chaos suite (docs/reliability.md): a deactivation was claimed, a return joined before
// its first step ran, and the step restarted the pass for the return's revision but executed it as a
// deactivation; the returned user ended without a link and with a Contact flagged inactive.
import { randomUUID } from "node:crypto";
import test from "ava";
import { runStep } from "../../src/workflows/step/dispatch.js";
import type { WorkflowRow } from "../../src/workflows/types.js";
import { makeUser } from "../helpers/factories.js";
import { testSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

async function startOrJoin(userId: string, intent: string, hash: string): Promise<string> {
  const { rows } = await db.pool.query<{ action: string }>(
    "select action from bitrix_sync.start_or_join_workflow($1, $2, $3, $4)",
    [userId, intent, randomUUID(), hash.padEnd(64, "0")],
  );
  return rows[0]?.action ?? "";
}

test("a return joining a claimed deactivation before its first step is executed as the return", async (t) => {
  const u = await makeUser(db.pool);
  t.is(await startOrJoin(u.id, "contact.deactivate", "d"), "started");
  const { rows } = await db.pool.query<WorkflowRow>(
    "select * from bitrix_sync.claim_workflows('test-worker', 10, make_interval(secs => 60)) where user_id = $1",
    [u.id],
  );
  const claimed = rows[0];
  if (!claimed) return t.fail("the workflow was not claimed");
  t.is(claimed.intent_type, "contact.deactivate");
  // The return joins after the claim, before the step begins.
  t.is(await startOrJoin(u.id, "contact.map_or_create", "m"), "joined");

  const c = await db.pool.connect();
  try {
    await c.query("begin");
    await runStep(c, claimed, testSettings().retry);
    await c.query("commit");
  } finally {
    c.release();
  }
  const { rows: after } = await db.pool.query<{
    state: string;
    revision: number;
    processed_revision: number;
    as: string | null;
    current_step: string;
  }>(
    `select state, revision, processed_revision, step_data ->> 'as' as as, current_step
       from bitrix_sync.workflow_instances where id = $1`,
    [claimed.id],
  );
  const wf = after[0];
  t.is(wf?.revision, 2);
  t.is(wf?.as, "contact.map_or_create", "the pass executes the newest intent");
  t.not(wf?.state, "succeeded", "the return is not marked processed by a deactivation's no_mapping");
  t.not(wf?.current_step, "deactivate_contact");
});
