// Cutover (§17): watermark, cancellation of earlier waiting intents, idempotence.
import test from "ava";
import { makeUser, queueRows } from "../helpers/factories.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("cutover cancels earlier pending/retry_wait contact intents once; later intents are processed", async (t) => {
  const before = await makeUser(db.pool);
  const retrying = await makeUser(db.pool);
  // Put one intent in retry_wait through the real functions; put the other back to pending.
  const claimed = (await db.pool.query("select * from bitrix_sync.claim_sync_tasks('w', 100)")).rows;
  t.is(claimed.length, 2);
  for (const row of claimed) {
    if (row.entity_id === retrying.id) {
      await db.pool.query("select bitrix_sync.retry_sync_task($1, $2, 'crm_timeout', '1 hour')", [
        row.id,
        row.lease_token,
      ]);
    } else {
      await db.pool.query("select bitrix_sync.release_sync_task($1, $2)", [row.id, row.lease_token]);
    }
  }
  const first = await db.pool.query("select * from bitrix_sync.perform_cutover('ops:cutover')");
  t.is(first.rows[0].cancelled_count, 2);
  t.false(first.rows[0].already_done);
  for (const u of [before, retrying]) {
    const rows = await queueRows(db.pool, u.id);
    t.deepEqual(
      rows.map((r) => [r.status, r.cancel_reason]),
      [["cancelled", "initial_full_sync_cutover"]],
    );
  }

  const after = await makeUser(db.pool);
  const second = await db.pool.query("select * from bitrix_sync.perform_cutover('ops:cutover')");
  t.true(second.rows[0].already_done);
  t.is(second.rows[0].cancelled_count, 2);
  t.deepEqual(second.rows[0].cutover_watermark, first.rows[0].cutover_watermark);
  t.deepEqual(
    (await queueRows(db.pool, after.id)).map((r) => r.status),
    ["pending"],
    "running it twice changes nothing more",
  );
  const claimedAfter = await db.pool.query("select entity_id from bitrix_sync.claim_sync_tasks('w', 100)");
  t.deepEqual(
    claimedAfter.rows.map((r) => r.entity_id),
    [after.id],
  );
});
