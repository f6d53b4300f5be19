// Locks no other role can take (docs/security.md, migration 000028). The intake's fold, the claim
// that waits for it, the intake watch that decides whether an App commit NOTIFYs, the cutover, the
// metrics fold and the webhook claim used advisory locks, which need no privilege: any role that
// can connect could take them and stall App->CRM intake or make every App commit NOTIFY (PostgreSQL
// serialises the commits of notifying transactions). These tests let a role with only CONNECT, and
// the App's role, take every lock they can get: the old advisory keys, and ROW EXCLUSIVE on every
// table of the project (a failing nextval() on a table's oid takes it and keeps it to the end of the
// transaction, no privilege needed), then check that the service still folds, claims, cuts over,
// folds its metrics and claims webhooks, and that the App's commits send no NOTIFY.
import { randomBytes } from "node:crypto";
import test from "ava";
import pg from "pg";
import { withDatabase } from "../../src/db/url.js";
import { makeUser } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";
import { one } from "../helpers/sql-core.js";
import { createTestDb, serverUrl, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
let outsider: string;
let admin: pg.Client;
test.before(async () => {
  db = await createTestDb();
  outsider = `bs_t_outsider_${randomBytes(4).toString("hex")}`;
  admin = new pg.Client({ connectionString: withDatabase(serverUrl(), "postgres") });
  await admin.connect();
  // CONNECT only: PUBLIC's default on a database; nothing of the project is granted to PUBLIC.
  await admin.query(`create role ${outsider} nologin`);
});
test.after.always(async () => {
  await db?.drop();
  await admin?.query(`drop role if exists ${outsider}`).catch(() => undefined);
  await admin?.end();
});

/**
 * A session of `role` holding every lock it can get, until `release()`: the advisory keys the
 * service used (the intake watch 727014/1, its sleeper 727014/2, the fold 727014/3, the cutover's,
 * the metrics fold's and the webhook claim's key of Contact `contact`), and ROW EXCLUSIVE on every table
 * and sequence of bitrix_sync and han_app, taken by oid without any right on them.
 */
async function holdEverything(
  role: string,
  contact: string,
): Promise<{ held: string[]; release: () => Promise<void> }> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  await c.query("begin");
  await c.query(`set local role ${role}`);
  await c.query(
    `select pg_advisory_lock(727014, 1), pg_advisory_lock(727014, 2), pg_advisory_lock(727014, 3),
                        pg_advisory_lock(hashtext('bitrix_sync.perform_cutover')),
                        pg_advisory_lock(hashtext('bitrix_sync.metric_events')),
                        pg_advisory_lock(hashtext('bitrix_sync.webhook_inbox'), hashtext('contact:' || $1))`,
    [contact],
  );
  await c.query(`do $$
    declare r record;
    begin
      for r in select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace
                where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'S', 'p')
      loop
        begin
          perform pg_relation_size(r.oid);
          perform nextval(r.oid::regclass);
        exception when others then null; -- the lock stays: sequence access keeps it for the transaction
        end;
      end loop;
    end $$`);
  const { rows } = await c.query<{ rel: string }>(
    `select l.relation::regclass::text as rel from pg_locks l
      where l.pid = pg_backend_pid() and l.locktype = 'relation' and l.mode = 'RowExclusiveLock' and l.granted
      order by 1`,
  );
  return {
    held: rows.map((r) => r.rel),
    release: async () => {
      await c.query("rollback").catch(() => undefined);
      await c.end();
    },
  };
}

/** A LISTEN connection on bitrix_sync_queue; `quiet()` says what arrived before a marker NOTIFY. */
async function listen(): Promise<{ notified: () => Promise<string[]>; end: () => Promise<void> }> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  const got: string[] = [];
  c.on("notification", (n) => got.push(n.payload ?? ""));
  await c.query("listen bitrix_sync_queue");
  return {
    notified: async () => {
      const m = `marker:${Math.random()}`;
      await db.pool.query("select pg_notify('bitrix_sync_queue', $1)", [m]);
      while (!got.includes(m)) await new Promise((r) => setTimeout(r, 10));
      return got.slice(0, got.indexOf(m));
    },
    end: () => c.end(),
  };
}

for (const who of ["outsider", "han_app_user"] as const) {
  test.serial(
    `a role with ${who === "outsider" ? "only CONNECT" : "the App's rights"} holding every lock it can get stalls no intake and forces no NOTIFY`,
    async (t) => {
      const role = who === "outsider" ? outsider : who;
      const contact = who === "outsider" ? "4711" : "4712";
      const attacker = await holdEverything(role, contact);
      t.teardown(attacker.release);
      t.true(
        attacker.held.includes("bitrix_sync.workflow_instances"),
        "the lock probe took ROW EXCLUSIVE by oid",
      );
      const l = await listen();
      t.teardown(l.end);

      // The App records intents: no NOTIFY (no loop watches).
      const u = await makeUser(db.pool, { fold: false });
      await asRole(db.pool, "han_app_user", (c) =>
        c.query("update han_app.user_identity set phone_number = '+79990008899' where id = $1", [u.id]),
      );
      t.deepEqual(await l.notified(), [], "the App's commits sent no NOTIFY");

      // The claim folds first and waits for a fold running elsewhere: it must not wait on the outsider.
      const claimed = await asRole(db.pool, "bitrix_sync_user", async (c) => {
        await c.query("set local statement_timeout = '5s'");
        return (
          await c.query<{ entity_id: string }>(
            "select entity_id from bitrix_sync.claim_sync_tasks('locks', 100, interval '60 seconds')",
          )
        ).rows;
      });
      t.true(
        claimed.some((r) => r.entity_id === u.id),
        "the claim folded and took the App's intents",
      );
      // The admin's fold, the cutover (a second call returns the first) and a webhook of the Contact.
      await asRole(db.pool, "bitrix_sync_admin", async (c) => {
        await c.query("set local statement_timeout = '5s'");
        await c.query("select bitrix_sync.fold_intent_journal(100, true)");
        t.true(
          (await one<{ already_done: boolean }>(c, "select * from bitrix_sync.perform_cutover('ops:locks')"))
            .already_done,
        );
      });
      await asRole(db.pool, "bitrix_sync_user", async (c) => {
        await c.query("set local statement_timeout = '5s'");
        const { rows } = await c.query<{ refusal: string | null }>(
          "select refusal from bitrix_sync.accept_webhooks(array['contact'], array[3], array[$1], array[null::inet])",
          [contact],
        );
        t.is(rows[0]?.refusal, null);
        const hooks = await c.query<{ entity_id: string }>(
          "select entity_id from bitrix_sync.claim_webhooks('locks', 10, interval '60 s', 'contact')",
        );
        t.true(
          hooks.rows.some((h) => h.entity_id === contact),
          `the webhook of Contact ${contact} was claimed`,
        );
      });
      // A scrape folds the counted transitions into the totals.
      await db.pool.query(
        "insert into bitrix_sync.metric_events (machine, kind, from_state, to_state) values ('command', 'contact.read', 'leased', 'in_flight')",
      );
      await asRole(db.pool, "bitrix_sync_user", async (c) => {
        await c.query("set local statement_timeout = '5s'");
        await c.query("select count(*) from bitrix_sync.metrics_snapshot(null, false)");
      });
      t.is(
        (await one<{ n: number }>(db.pool, "select count(*)::int as n from bitrix_sync.metric_events")).n,
        0,
        "the scrape folded metric_events",
      );
    },
  );
}

test.serial(
  "a role holding ROW EXCLUSIVE on the watch's table makes a loop poll instead of watching, and no App commit NOTIFYs meanwhile",
  async (t) => {
    const attacker = await holdEverything(outsider, "4713");
    t.teardown(attacker.release);
    t.true(attacker.held.includes("bitrix_sync.lock_intake_watch"));
    const l = await listen();
    t.teardown(l.end);
    const w = new pg.Client({ connectionString: db.url });
    await w.connect();
    t.teardown(() => w.end());
    await w.query("begin");
    // The loop tries for 1 s without queueing: the App's try is never made to fail by a waiting loop.
    const watch = w.query<{ w: boolean }>("select bitrix_sync.watch_intake() as w");
    const u = await makeUser(db.pool, { fold: false });
    await asRole(db.pool, "han_app_user", (c) =>
      c.query("update han_app.user_identity set phone_number = '+79990008877' where id = $1", [u.id]),
    );
    t.false((await watch).rows[0]?.w, "the loop polls this time");
    await w.query("rollback");
    t.deepEqual(await l.notified(), [], "the App's commits sent no NOTIFY");
  },
);
