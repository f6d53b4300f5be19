// Cutover (§17): the watermark, cancellation of earlier waiting intents, idempotence, the gate it
// opens, and who may perform it. This file's database starts without a cutover.
import test from "ava";
import { makeUser, queueRows } from "../helpers/factories.js";
import { asRoleRolledBack } from "../helpers/roles.js";
import { forceRow, one, rejectsWith } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb({ cutover: false });
});
test.after.always(async () => {
  await db?.drop();
});

const DENIED = "42501";

test.serial(
  "before the cutover every claim function returns nothing, for every role that may claim",
  async (t) => {
    const u = await makeUser(db.pool);
    const alert = await one<{ id: string }>(
      db.pool,
      "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('c', 64), null)",
    );
    await db.pool.query("select bitrix_sync.issue_alert_command($1, 'alert.get', '{}')", [alert.id]);
    await db.pool.query("select bitrix_sync.start_or_join_workflow($1, 'contact.update', null, null)", [
      u.id,
    ]);
    await db.pool.query("select * from bitrix_sync.accept_webhooks('{contact}', '{3}', '{77}', '{null}')");
    const claims = [
      "select * from bitrix_sync.claim_sync_tasks('w', 100, interval '60 seconds')",
      "select * from bitrix_sync.claim_workflows('w', 100, interval '60 seconds')",
      "select * from bitrix_sync.claim_commands('w', 100, interval '60 seconds')",
      "select * from bitrix_sync.claim_webhooks('w', 100, interval '60 seconds')",
      "select * from bitrix_sync.claim_reconciliation_cursor('contacts', '0 seconds', true)",
    ];
    for (const sql of claims) {
      t.is((await db.pool.query(sql)).rows.length, 0, `owner: ${sql}`);
      t.is(
        (await asRoleRolledBack(db.pool, "bitrix_sync_user", (c) => c.query(sql))).rows.length,
        0,
        `runtime: ${sql}`,
      );
    }
    t.false((await one<{ ok: boolean }>(db.pool, "select bitrix_sync.cutover_performed() as ok")).ok);
    // Everything was recorded and waits.
    t.deepEqual(
      (await queueRows(db.pool, u.id)).map((r) => r.status),
      ["pending"],
    );
  },
);

test.serial(
  "the runtime role cannot perform the cutover nor write the cutover row; the admin performs it",
  async (t) => {
    for (const sql of [
      "select * from bitrix_sync.perform_cutover('svc')",
      "insert into bitrix_sync.cutover (cutover_watermark, cancelled_count, performed_by) values (now() + interval '10 years', 0, 'svc')",
    ]) {
      await rejectsWith(
        t,
        asRoleRolledBack(db.pool, "bitrix_sync_user", (c) => c.query(sql)),
        DENIED,
        sql,
      );
    }
    await asRoleRolledBack(db.pool, "bitrix_sync_admin", async (c) => {
      const { rows } = await c.query("select * from bitrix_sync.perform_cutover('ops:admin')");
      t.false(rows[0].already_done);
      // Rolled back with the transaction: the next test performs it for real.
    });
    await asRoleRolledBack(db.pool, "bitrix_sync_user", async (c) => {
      t.is(
        (await c.query("select * from bitrix_sync.cutover")).rows.length,
        0,
        "the runtime role reads the cutover",
      );
    });
  },
);

test.serial(
  "cutover cancels earlier pending/retry_wait/leased contact intents once; later intents are processed",
  async (t) => {
    const before = await makeUser(db.pool);
    const retrying = await makeUser(db.pool);
    const leased = await makeUser(db.pool);
    // Recorded by the App but not folded yet: the cutover folds it first, then cancels it too.
    const unfolded = await makeUser(db.pool, { fold: false });
    // Put one intent in retry_wait, one leased with an expired lease (a worker of a release without
    // the gate); nothing can claim them before the cutover.
    const [r] = await queueRows(db.pool, retrying.id);
    await forceRow(db.pool, "han_app.sync_queue", r?.id as string, {
      status: "retry_wait",
      next_attempt_at: new Date(Date.now() + 3600_000),
      last_error_code: "crm_timeout",
    });
    const [l] = await queueRows(db.pool, leased.id);
    await forceRow(db.pool, "han_app.sync_queue", l?.id as string, {
      status: "leased",
      locked_by: "old-worker",
      locked_until: new Date(Date.now() - 60_000),
      lease_token: "00000000-0000-4000-8000-000000000001",
    });
    const first = await db.pool.query("select * from bitrix_sync.perform_cutover('ops:cutover')");
    // The first test's user is a stub-era intent too.
    t.is(first.rows[0].cancelled_count, 5);
    t.false(first.rows[0].already_done);
    t.is(
      (await db.pool.query("select 1 from han_app.sync_queue_journal")).rowCount,
      0,
      "the journal was folded",
    );
    for (const u of [before, retrying, leased, unfolded]) {
      const rows = await queueRows(db.pool, u.id);
      t.deepEqual(
        rows.map((row) => [row.status, row.cancel_reason, row.lease_token]),
        [["cancelled", "initial_full_sync_cutover", null]],
      );
    }

    const after = await makeUser(db.pool);
    const second = await db.pool.query("select * from bitrix_sync.perform_cutover('ops:cutover')");
    t.true(second.rows[0].already_done);
    t.is(second.rows[0].cancelled_count, 5);
    t.deepEqual(second.rows[0].cutover_watermark, first.rows[0].cutover_watermark);
    t.deepEqual(
      (await queueRows(db.pool, after.id)).map((row) => row.status),
      ["pending"],
      "running it twice changes nothing more",
    );
    const claimedAfter = await db.pool.query(
      "select entity_id from bitrix_sync.claim_sync_tasks('w', 100, interval '60 seconds')",
    );
    t.deepEqual(
      claimedAfter.rows.map((row) => row.entity_id),
      [after.id],
    );
    // The gate is open for the rest: the waiting webhook and workflow are claimed now.
    t.is(
      (await db.pool.query("select * from bitrix_sync.claim_webhooks('w', 100, interval '60 seconds')")).rows
        .length,
      1,
    );
    t.is(
      (await db.pool.query("select * from bitrix_sync.claim_workflows('w', 100, interval '60 seconds')")).rows
        .length,
      1,
    );
  },
);

test.serial("the cutover row never changes and is never deleted, not even by the owner", async (t) => {
  await rejectsWith(
    t,
    db.pool.query("update bitrix_sync.cutover set cutover_watermark = now() + interval '10 years'"),
    "BS031",
  );
  await rejectsWith(t, db.pool.query("delete from bitrix_sync.cutover"), "BS003");
  await rejectsWith(
    t,
    asRoleRolledBack(db.pool, "bitrix_sync_user", (c) =>
      c.query("update bitrix_sync.cutover set cutover_watermark = now() + interval '10 years'"),
    ),
    DENIED,
  );
});
