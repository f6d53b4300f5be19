// Retention (issue 11; sql/retention.sql, src/maintenance/retention.ts): finished rows past their
// retention.*_days go in small batches, one short transaction each, skipping locked rows and never
// waiting for a table lock; audit rows and whatever an open dead letter or an unfinished workflow
// refers to stay. What retention_preview() promises is what a run deletes.
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import test from "ava";
import type pg from "pg";
import { inTransaction } from "../../src/db/tx.js";
import { runRetention } from "../../src/maintenance/retention.js";
import { createLogger } from "../../src/observability/logger.js";
import { deadLetteredWebhook, queryAsRole, workflowFailedByCommand } from "../helpers/dead-letters.js";
import { makeUser } from "../helpers/factories.js";
import { setSettings, testSettings } from "../helpers/settings.js";
import { one, rejectsWith, session } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
const log = createLogger({ destination: new Writable({ write: (_c, _e, cb) => cb() }) });
const BATCH = 10;

test.before(async () => {
  db = await createTestDb();
  await setSettings(db, { "retention.batch_size": BATCH });
});
test.after.always(async () => {
  await db?.drop();
});

const settings = (changes: Record<string, unknown> = {}) =>
  testSettings({ "retention.batch_size": BATCH, ...changes }).retention;
const count = async (sql: string, params: unknown[] = []) =>
  (await one<{ n: number }>(db.pool, `select count(*)::int as n from (${sql}) x`, params)).n;
/**
 * Writes history straight into its final states, as months of traffic leave it: with the row guards
 * off (sql/row_guards.sql lets a row be born only in its initial state).
 */
async function history<R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> {
  return await inTransaction(db.pool, async (c) => {
    await c.query("set local session_replication_role = replica");
    return (await c.query<R>(sql, params)).rows;
  });
}
const historyRow = async <R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R> => {
  const [row] = await history<R>(sql, params);
  if (!row) throw new Error(`no row from: ${sql}`);
  return row;
};
const exists = async (table: string, id: string) =>
  (await count(`select 1 from ${table} where id = $1`, [id])) === 1;

/** Finished webhooks of one Contact: one processed read and the events coalesced into it. */
async function processedWebhooks(entityId: string, n: number, daysAgo: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    ids.push(
      (
        await one<{ id: string }>(db.pool, "select bitrix_sync.record_webhook('contact', 3, $1) as id", [
          entityId,
        ])
      ).id,
    );
  }
  const claimed = await one<{ id: string; lease_token: string }>(
    db.pool,
    "select id, lease_token from bitrix_sync.claim_webhooks('retention-test', 1000, interval '60 seconds') where entity_id = $1",
    [entityId],
  );
  await db.pool.query("select bitrix_sync.complete_webhook($1, $2, 'applied')", [
    claimed.id,
    claimed.lease_token,
  ]);
  await db.pool.query(
    `update bitrix_sync.webhook_inbox set processed_at = now() - make_interval(days => $2), status_at = now() - make_interval(days => $2)
      where id = any($1::bigint[])`,
    [ids, daysAgo],
  );
  return ids;
}

/** A finished workflow (and its finished commands) of `userId`, `daysAgo` old. */
async function finishedWorkflow(userId: string, daysAgo: number, commands = 2) {
  const wf = await historyRow<{ id: string }>(
    `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, finished_at, created_at, outcome)
     values ('contact.update', 'contact.update', $1, 'succeeded', now() - make_interval(days => $2),
             now() - make_interval(days => $2, secs => 5), 'updated') returning id`,
    [userId, daysAgo],
  );
  const cmds: string[] = [];
  for (let i = 0; i < commands; i++) {
    cmds.push(
      (
        await historyRow<{ id: string }>(
          `insert into bitrix_sync.crm_commands (workflow_id, command_type, status, completed_at)
           values ($1, 'contact.read', 'succeeded', now() - make_interval(days => $2)) returning id`,
          [wf.id, daysAgo],
        )
      ).id,
    );
  }
  return { id: wf.id, commands: cmds };
}

async function finishedIntents(n: number, status: string, daysAgo: number): Promise<string[]> {
  const rows = await history<{ id: string }>(
    `insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, status, completed_at, created_at)
     select 'contact.update', 'user', u, 'contact.update:user:' || u, $1, now() - make_interval(days => $3),
            now() - make_interval(days => $3)
       from (select gen_random_uuid() as u from generate_series(1, $2)) g
     returning id`,
    [status, n, daysAgo],
  );
  return rows.map((r) => r.id);
}

const AUDIT = [
  "bitrix_sync.entity_external_mapping",
  "bitrix_sync.rebind_requests",
  "bitrix_sync.settings_versions",
  "bitrix_sync.business_alerts",
  "bitrix_sync.cutover",
  "bitrix_sync.technical_dead_letters",
];
const auditCounts = async () =>
  Object.fromEntries(
    await Promise.all(AUDIT.map(async (t) => [t, await count(`select 1 from ${t}`)] as const)),
  );

test.serial(
  "a run deletes what retention_preview() shows, in batches, and keeps audit and referenced rows",
  async (t) => {
    // webhooks: 12 old finished (1 read + 11 coalesced), 2 recent, an old dead letter still open
    // (kept) and one acknowledged (deleted).
    const oldHooks = await processedWebhooks("900001", 12, 10);
    const recentHooks = await processedWebhooks("900002", 2, 1);
    const openDead = await deadLetteredWebhook(db.pool, "900003");
    const ackedDead = await deadLetteredWebhook(db.pool, "900004");
    await queryAsRole(
      db.pool,
      "bitrix_sync_admin",
      "select * from bitrix_sync.acknowledge_dead_letter($1, 'ops:t', 'seen it')",
      [ackedDead.dl.id],
    );
    await db.pool.query(
      "update bitrix_sync.webhook_inbox set status_at = now() - interval '10 days' where id = any($1::bigint[])",
      [[openDead.inboxId, ackedDead.inboxId]],
    );

    // workflows and commands
    const user = randomUUID();
    const older = await finishedWorkflow(user, 100); // deleted with its commands
    const newest = await finishedWorkflow(user, 99); // its commands go; the user's newest workflow stays
    const recent = await finishedWorkflow(randomUUID(), 5); // young: everything stays
    const mapped = await finishedWorkflow(randomUUID(), 100, 1); // a mapping refers to it: stays
    const mappedUser = await makeUser(db.pool);
    await db.pool.query("select bitrix_sync.open_mapping($1, '880001', $2)", [mappedUser.id, mapped.id]);
    await finishedWorkflow(mapped.id, 1, 0); // (another user's newer workflow: irrelevant to the rule)
    const failed = await workflowFailedByCommand(db.pool); // an open dead letter refers to it
    await db.pool.query(
      "update bitrix_sync.workflow_instances set finished_at = now() - interval '100 days' where id = $1",
      [failed.workflowId],
    );
    await db.pool.query(
      "update bitrix_sync.crm_commands set completed_at = now() - interval '100 days' where id = $1",
      [failed.commandId],
    );
    const active = await historyRow<{ id: string }>(
      `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, current_step)
     values ('contact.update', 'contact.update', $1, 'waiting_manual', 'manual') returning id`,
      [randomUUID()],
    );
    const activeCmd = await historyRow<{ id: string }>(
      `insert into bitrix_sync.crm_commands (workflow_id, command_type, status, completed_at)
     values ($1, 'contact.read', 'succeeded', now() - interval '100 days') returning id`,
      [active.id],
    );

    // queue: 25 old processed + 3 old cancelled go; recent, pending and an open dead letter's stay.
    const oldIntents = [
      ...(await finishedIntents(25, "processed", 40)),
      ...(await finishedIntents(3, "cancelled", 40)),
    ];
    const recentIntents = await finishedIntents(2, "processed", 2);
    const pendingUser = await makeUser(db.pool);
    const dead = randomUUID();
    const deadIntent = await historyRow<{ id: string }>(
      `insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, status, completed_at)
     values ('contact.update', 'user', $1, $2, 'dead_letter', now() - interval '40 days') returning id`,
      [dead, `contact.update:user:${dead}`],
    );
    await db.pool.query(
      "insert into bitrix_sync.technical_dead_letters (source, source_id, operation, error_code) values ('sync_queue', $1, 'contact.update', 'intake_failed')",
      [deadIntent.id],
    );

    const audit = await auditCounts();
    const preview = Object.fromEntries(
      (
        await queryAsRole<{ table_name: string; deletable: number }>(
          db.pool,
          "bitrix_sync_admin",
          "select table_name, deletable::int from bitrix_sync.retention_preview()",
        )
      ).map((r) => [r.table_name, r.deletable]),
    );
    t.deepEqual(preview, { webhooks: 13, commands: 5, workflows: 1, queue: 28 });

    const report = await runRetention(db.pool, settings(), log);
    t.deepEqual(report.deleted, preview, "the run deletes what the preview showed");
    t.deepEqual(report.skipped, []);
    t.true(report.batches >= 7, `small batches (${report.batches})`);

    for (const id of oldHooks) t.false(await exists("bitrix_sync.webhook_inbox", id), `old event ${id}`);
    for (const id of recentHooks) t.true(await exists("bitrix_sync.webhook_inbox", id));
    t.true(await exists("bitrix_sync.webhook_inbox", openDead.inboxId), "an open dead letter's event stays");
    t.false(await exists("bitrix_sync.webhook_inbox", ackedDead.inboxId), "acknowledged dead event");
    t.false(await exists("bitrix_sync.workflow_instances", older.id), "older workflow");
    t.true(await exists("bitrix_sync.workflow_instances", newest.id), "the user's newest workflow stays");
    for (const c of [...older.commands, ...newest.commands])
      t.false(await exists("bitrix_sync.crm_commands", c));
    t.true(await exists("bitrix_sync.workflow_instances", recent.id));
    for (const c of recent.commands) t.true(await exists("bitrix_sync.crm_commands", c));
    t.true(await exists("bitrix_sync.workflow_instances", mapped.id), "the workflow of a mapping stays");
    t.true(
      await exists("bitrix_sync.workflow_instances", failed.workflowId),
      "an open dead letter's workflow stays",
    );
    t.true(await exists("bitrix_sync.crm_commands", failed.commandId));
    t.true(await exists("bitrix_sync.crm_commands", activeCmd.id), "an unfinished workflow's commands stay");

    for (const id of oldIntents) t.false(await exists("han_app.sync_queue", id), `intent ${id}`);
    for (const id of recentIntents) t.true(await exists("han_app.sync_queue", id));
    t.true(await exists("han_app.sync_queue", deadIntent.id));
    t.is(
      await count("select 1 from han_app.sync_queue where entity_id = $1 and status = 'pending'", [
        pendingUser.id,
      ]),
      1,
    );

    t.deepEqual(await auditCounts(), audit, "audit tables are untouched");
    const again = await runRetention(db.pool, settings(), log);
    t.deepEqual(again.deleted, { webhooks: 0, commands: 0, workflows: 0, queue: 0 });
  },
);

test.serial("a batch skips rows someone holds and never waits for a table lock", async (t) => {
  const [held, free] = await finishedIntents(2, "processed", 40);
  const locker = await session(db.pool);
  try {
    await locker.c.query("begin");
    await locker.c.query("select 1 from han_app.sync_queue where id = $1 for update", [held]);
    const n = await one<{ n: number }>(db.pool, "select bitrix_sync.delete_retention_batch('queue') as n");
    t.is(n.n, 1);
    t.true(await exists("han_app.sync_queue", held as string), "the held row is left for the next run");
    t.false(await exists("han_app.sync_queue", free as string));
    await locker.c.query("rollback");

    // A table lock (a migration, say): the batch gives up after lock_timeout instead of queueing
    // behind it, where the App's own writes would queue behind the batch.
    await locker.c.query("begin");
    await locker.c.query("lock table han_app.sync_queue in access exclusive mode");
    const started = Date.now();
    const report = await runRetention(db.pool, settings(), log);
    const elapsed = Date.now() - started;
    t.deepEqual(report.skipped, ["queue"]);
    t.true(elapsed < 5_000, `gave up at once (${elapsed} ms)`);
    t.log(`retention run with sync_queue locked: ${elapsed} ms`);
    await locker.c.query("rollback");
  } finally {
    await locker.c.query("rollback").catch(() => undefined);
    locker.done();
  }
  const report = await runRetention(db.pool, settings(), log);
  t.deepEqual(report.skipped, []);
  t.false(await exists("han_app.sync_queue", held as string), "the next run takes it");
});

test.serial("retention.enabled = false deletes nothing; bad table names are refused", async (t) => {
  const ids = await finishedIntents(3, "processed", 40);
  const report = await runRetention(db.pool, settings({ "retention.enabled": false }), log);
  t.false(report.ran);
  for (const id of ids) t.true(await exists("han_app.sync_queue", id));
  const e = await rejectsWith(
    t,
    db.pool.query("select bitrix_sync.delete_retention_batch('mappings')"),
    "BS004",
  );
  t.truthy(e.hint);
});

test.serial(
  "the runtime role deletes through the function only; the App role cannot; the admin can preview",
  async (t) => {
    const ids = await finishedIntents(2, "processed", 40);
    const [r] = await queryAsRole<{ n: number }>(
      db.pool,
      "bitrix_sync_user",
      "select bitrix_sync.delete_retention_batch('queue') as n",
    );
    t.true((r?.n ?? 0) >= 2);
    for (const id of ids) t.false(await exists("han_app.sync_queue", id));
    await rejectsWith(t, queryAsRole(db.pool, "bitrix_sync_user", "delete from han_app.sync_queue"), "42501");
    await rejectsWith(
      t,
      queryAsRole(db.pool, "bitrix_sync_user", "select * from bitrix_sync.retention_preview()"),
      "42501",
    );
    for (const sql of [
      "select bitrix_sync.delete_retention_batch('queue')",
      "select * from bitrix_sync.retention_preview()",
    ]) {
      await rejectsWith(t, queryAsRole(db.pool, "han_app_user", sql), "42501", sql);
    }
    await queryAsRole(db.pool, "bitrix_sync_admin", "select bitrix_sync.delete_retention_batch('webhooks')");
  },
);

test.serial(
  "workflows are swept a window at a time past the kept ones, the place kept between calls and runs",
  async (t) => {
    // 450 kept workflows (each user's only one, so its newest), older than the one to delete: the
    // batch used to read all of them before reaching it. A window is 20 x the batch (200).
    await history(
      `insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state, finished_at, created_at, outcome)
       select 'contact.update', 'contact.update', gen_random_uuid(), 'succeeded',
              now() - interval '300 days' + make_interval(secs => g), now() - interval '301 days', 'updated'
         from generate_series(1, 450) g`,
    );
    const user = randomUUID();
    const old = await finishedWorkflow(user, 200, 0);
    await finishedWorkflow(user, 199, 0); // the user's newest: kept
    const reset = () =>
      db.pool.query(
        "update bitrix_sync.retention_sweeps set after_finished_at = null, after_id = null where table_name = 'workflows'",
      );
    await reset();
    const step = (since: Date | null) =>
      one<{ deleted: number; more: boolean }>(
        db.pool,
        "select deleted, more from bitrix_sync.retention_step('workflows', $1)",
        [since],
      );
    const place = () =>
      one<{ after_id: string | null; last_round_ended_at: Date | null }>(
        db.pool,
        "select after_id, last_round_ended_at from bitrix_sync.retention_sweeps where table_name = 'workflows'",
      );

    // The previous release's task: one window, 0, so it stops; the place moved on.
    t.is(
      (await one<{ n: number }>(db.pool, "select bitrix_sync.delete_retention_batch('workflows') as n")).n,
      0,
    );
    t.not((await place()).after_id, null, "the sweep remembers where it stopped");
    t.true(await exists("bitrix_sync.workflow_instances", old.id));
    // The next calls go on from there: 400 kept examined, then the window that holds it ends the round.
    t.deepEqual(await step(null), { deleted: 0, more: true });
    t.deepEqual(await step(null), { deleted: 1, more: false });
    t.false(await exists("bitrix_sync.workflow_instances", old.id), "found beyond the kept ones");
    const ended = await place();
    t.is(ended.after_id, null, "a new round starts from the oldest");
    t.truthy(ended.last_round_ended_at);

    // A run that starts in the middle of a round goes round once more: nothing is left behind the
    // place it started from.
    const other = randomUUID();
    const behind = await finishedWorkflow(other, 250, 0); // older than every kept one
    await finishedWorkflow(other, 1, 0);
    t.deepEqual(await step(null), { deleted: 0, more: true }, "a window past it: the place is beyond it");
    const report = await runRetention(db.pool, settings(), log);
    t.is(report.deleted.workflows, 1);
    t.false(await exists("bitrix_sync.workflow_instances", behind.id), "the run went round again for it");
    t.is((await place()).after_id, null, "the run ended with a whole round");
    const again = await runRetention(db.pool, settings(), log);
    t.is(again.deleted.workflows, 0);
    t.true(again.batches <= 8, `one round, a window at a time (${again.batches} steps)`);

    await rejectsWith(
      t,
      db.pool.query("select * from bitrix_sync.retention_step('mappings', now())"),
      "BS004",
    );
    const [r] = await queryAsRole<{ more: boolean }>(
      db.pool,
      "bitrix_sync_user",
      "select more from bitrix_sync.retention_step('workflows', now())",
    );
    t.is(typeof r?.more, "boolean", "the runtime role calls it");
    await rejectsWith(
      t,
      queryAsRole(db.pool, "han_app_user", "select * from bitrix_sync.retention_step('workflows', now())"),
      "42501",
    );
  },
);
