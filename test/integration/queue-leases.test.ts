// Leases on han_app.sync_queue (§6.1): SKIP LOCKED claims, lease expiry and reclaim, fencing.
import test from "ava";
import pg from "pg";
import { claimSyncTasks } from "../helpers/claims.js";
import { foldJournal, makeUser } from "../helpers/factories.js";
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
  locked_by: string;
  attempt_count: number;
  entity_id: string;
}

const claim = claimSyncTasks<Claimed>;

test.serial("two connections claiming at once never get the same row", async (t) => {
  const users = [];
  for (let i = 0; i < 120; i++) users.push(await makeUser(db.pool));
  const ids = new Set<string>(
    (
      await db.pool.query<{ id: string }>("select id from han_app.sync_queue where entity_id = any($1)", [
        users.map((u) => u.id),
      ])
    ).rows.map((r) => r.id),
  );
  const a = new pg.Client({ connectionString: db.url });
  const b = new pg.Client({ connectionString: db.url });
  await a.connect();
  await b.connect();
  try {
    const seenA: string[] = [];
    const seenB: string[] = [];
    const loop = async (c: pg.Client, name: string, out: string[]) => {
      for (;;) {
        const got = await claim(c, name, 7);
        if (got.length === 0) return;
        out.push(...got.map((r) => r.id));
      }
    };
    await Promise.all([loop(a, "worker-a", seenA), loop(b, "worker-b", seenB)]);
    const overlap = seenA.filter((id) => seenB.includes(id));
    t.deepEqual(overlap, []);
    const all = new Set([...seenA, ...seenB]);
    for (const id of ids) t.true(all.has(id));
    t.true(seenA.length > 0 && seenB.length > 0, "both workers got work");
  } finally {
    await a.end();
    await b.end();
    // Leave nothing leased for the next tests.
    await db.pool.query(
      "update han_app.sync_queue set status = 'cancelled', cancel_reason = 'test', completed_at = now(), lease_token = null, locked_by = null, locked_until = null where status in ('leased','pending')",
    );
  }
});

test.serial("each claim issues a new lease token; complete only under the current token", async (t) => {
  const u = await makeUser(db.pool);
  const [first] = await claim(db.pool, "w1", 50);
  t.truthy(first);
  t.is(first?.entity_id, u.id);
  t.is(first?.locked_by, "w1");
  t.is(first?.attempt_count, 1);
  const wrong = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_sync_task($1, gen_random_uuid())", [first?.id]),
    "BS001",
  );
  t.truthy(wrong.hint);
  await db.pool.query("select bitrix_sync.complete_sync_task($1, $2)", [first?.id, first?.lease_token]);
  const { rows } = await db.pool.query(
    "select status, completed_at, lease_token from han_app.sync_queue where id = $1",
    [first?.id],
  );
  t.is(rows[0].status, "processed");
  t.truthy(rows[0].completed_at);
  t.is(rows[0].lease_token, null);
});

test.serial(
  "lease expiry: another worker reclaims, and the stale holder's completion is refused",
  async (t) => {
    await makeUser(db.pool);
    const [held] = await claim(db.pool, "slow-worker", 1, "1 second");
    t.truthy(held);
    t.deepEqual(await claim(db.pool, "fast-worker", 10), [], "a live lease is not reclaimable");
    // Expire the lease (as if the slow worker stalled).
    await db.pool.query(
      "update han_app.sync_queue set locked_until = now() - interval '1 second' where id = $1",
      [held?.id],
    );
    const [re] = await claim(db.pool, "fast-worker", 10);
    t.is(re?.id, held?.id);
    t.not(re?.lease_token, held?.lease_token);
    t.is(re?.attempt_count, 2);
    for (const fn of [
      "complete_sync_task($1, $2)",
      "retry_sync_task($1, $2, 'crm_timeout', '1 minute')",
      "dead_letter_sync_task($1, $2, 'x')",
      "extend_sync_task_lease($1, $2, '1 minute')",
      "release_sync_task($1, $2)",
    ]) {
      const err = await rejectsWith(
        t,
        db.pool.query(`select bitrix_sync.${fn}`, [held?.id, held?.lease_token]),
        "BS001",
        fn,
      );
      t.regex(err.message, /not held under this lease token/);
    }
    await db.pool.query("select bitrix_sync.complete_sync_task($1, $2)", [re?.id, re?.lease_token]);
  },
);

test.serial("a newer intent for a leased row takes it back to pending and fences the holder", async (t) => {
  const u = await makeUser(db.pool);
  const [held] = await claim(db.pool, "w", 10);
  await db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [u.id]);
  await db.pool.query("update han_app.user_identity set record_status = 'active' where id = $1", [u.id]);
  await foldJournal(db.pool);
  const { rows } = await db.pool.query("select status, lease_token from han_app.sync_queue where id = $1", [
    held?.id,
  ]);
  t.is(rows[0].status, "pending");
  await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.complete_sync_task($1, $2)", [held?.id, held?.lease_token]),
    "BS001",
  );
  await db.pool.query(
    "update han_app.sync_queue set status='cancelled', cancel_reason='test', completed_at=now() where entity_id = $1 and status = 'pending'",
    [u.id],
  );
});

test.serial(
  "retry_wait becomes claimable when due; dead letter writes a technical DLQ row with the safe code",
  async (t) => {
    await makeUser(db.pool);
    const [held] = await claim(db.pool, "w", 1);
    await db.pool.query("select bitrix_sync.retry_sync_task($1, $2, 'db_unavailable', '1 hour')", [
      held?.id,
      held?.lease_token,
    ]);
    t.deepEqual(await claim(db.pool, "w", 10), [], "not before next_attempt_at");
    await db.pool.query(
      "update han_app.sync_queue set next_attempt_at = now() - interval '1 second' where id = $1",
      [held?.id],
    );
    const [again] = await claim(db.pool, "w", 10);
    t.is(again?.id, held?.id);
    await rejectsWith(
      t,
      db.pool.query("select bitrix_sync.dead_letter_sync_task($1, $2, 'Phone +79991234567 rejected')", [
        again?.id,
        again?.lease_token,
      ]),
      "BS004",
      "raw text is refused as an error code",
    );
    await db.pool.query("select bitrix_sync.dead_letter_sync_task($1, $2, 'invariant_broken')", [
      again?.id,
      again?.lease_token,
    ]);
    const { rows } = await db.pool.query(
      "select source, source_id, error_code, operation from bitrix_sync.technical_dead_letters where source_id = $1",
      [again?.id],
    );
    t.deepEqual(rows, [
      {
        source: "sync_queue",
        source_id: again?.id,
        error_code: "invariant_broken",
        operation: "contact.map_or_create",
      },
    ]);
  },
);

test.serial(
  "retry_sync_task past the retry horizon dead-letters the intent itself, counted from its arrival",
  async (t) => {
    await makeUser(db.pool);
    const [held] = await claim(db.pool, "w", 1);
    // The intent arrived 23 h 59 min 30 s ago: a one-minute back-off would land past the 24 h horizon.
    const arrived = new Date(Date.now() - 86_400_000 + 30_000);
    await db.pool.query("update han_app.sync_queue set created_at = $2 where id = $1", [held?.id, arrived]);
    const { rows: out } = await db.pool.query(
      "select status, last_error_code, lease_token, completed_at is not null as done from bitrix_sync.retry_sync_task($1, $2, 'intake_failed', '1 minute')",
      [held?.id, held?.lease_token],
    );
    t.deepEqual(out, [
      { status: "dead_letter", last_error_code: "retry_horizon_exceeded", lease_token: null, done: true },
    ]);
    const { rows: dl } = await db.pool.query(
      "select source, operation, error_code, attempt_count, first_attempt_at, deadline_at from bitrix_sync.technical_dead_letters where source_id = $1",
      [held?.id],
    );
    t.deepEqual(dl, [
      {
        source: "sync_queue",
        operation: "contact.map_or_create",
        error_code: "retry_horizon_exceeded",
        attempt_count: 1,
        first_attempt_at: arrived,
        deadline_at: new Date(arrived.getTime() + 86_400_000),
      },
    ]);

    // Inside the horizon the same call parks the intent for later.
    await makeUser(db.pool);
    const [fresh] = await claim(db.pool, "w", 1);
    const { rows: wait } = await db.pool.query(
      "select status from bitrix_sync.retry_sync_task($1, $2, 'intake_failed', '1 minute')",
      [fresh?.id, fresh?.lease_token],
    );
    t.deepEqual(wait, [{ status: "retry_wait" }]);
    await db.pool.query(
      "update han_app.sync_queue set status = 'cancelled', cancel_reason = 'test', completed_at = now() where id = $1",
      [fresh?.id],
    );
  },
);

test.serial("a hand-written UPDATE that skips an edge is refused by the guard trigger", async (t) => {
  const u = await makeUser(db.pool);
  const err = await rejectsWith(
    t,
    db.pool.query(
      "update han_app.sync_queue set status = 'processed', completed_at = now() where entity_id = $1",
      [u.id],
    ),
    "BS002",
  );
  t.regex(err.message, /illegal sync_queue transition pending -> processed/);
  t.truthy(err.hint);
});

test.serial("claim refuses nonsensical limits with a hint", async (t) => {
  const err = await rejectsWith(
    t,
    db.pool.query("select * from bitrix_sync.claim_sync_tasks('w', 0, interval '60 seconds')"),
    "BS004",
  );
  t.truthy(err.hint);
});
