// han_app.enqueue_contact_sync() (§6.2): every decision of the trigger, against real PostgreSQL.
import { randomUUID } from "node:crypto";
import test from "ava";
import pg from "pg";
import { inTransaction } from "../../src/db/tx.js";
import { makeUser, queueRows } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";
import { one } from "../helpers/sql-core.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("inserting an active identity and profile records one coalesced contact.map_or_create", async (t) => {
  const u = await makeUser(db.pool);
  const rows = await queueRows(db.pool, u.id);
  t.is(rows.length, 1);
  const [row] = rows;
  t.is(row?.task_type, "contact.map_or_create");
  t.is(row?.status, "pending");
  t.is(row?.dedup_key, `contact.map_or_create:user:${u.id}`);
  // The profile insert coalesced into the identity's intent; the payload is the newest reason.
  t.deepEqual(Object.keys(row?.payload_json ?? {}).sort(), [
    "reason",
    "schema_version",
    "source_updated_at",
    "user_id",
  ]);
  t.is(row?.payload_json.user_id, u.id);
  t.is(row?.payload_json.schema_version, 1);
  t.is(row?.payload_json.reason, "profile_created");
  t.regex(String(row?.payload_json.source_updated_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
});

test("the payload carries no PII: no phone, name or email", async (t) => {
  const u = await makeUser(db.pool, { fullName: "Ivan Petrov" });
  const [row] = await queueRows(db.pool, u.id);
  const text = JSON.stringify(row?.payload_json);
  t.false(text.includes(u.phone));
  t.false(text.includes("Ivan"));
});

test("an inactive insert records nothing", async (t) => {
  const u = await makeUser(db.pool, { status: "inactive" });
  t.deepEqual(await queueRows(db.pool, u.id), []);
});

test("a phone change records contact.update", async (t) => {
  const u = await makeUser(db.pool);
  await db.pool.query("update han_app.user_identity set phone_number = '+79990001122' where id = $1", [u.id]);
  const rows = await queueRows(db.pool, u.id);
  t.deepEqual(
    rows.map((r) => [r.task_type, r.payload_json.reason]),
    [
      ["contact.map_or_create", "profile_created"],
      ["contact.update", "identity_phone_changed"],
    ],
  );
});

test("a phone update to the same value (IS NOT DISTINCT FROM) records nothing", async (t) => {
  const u = await makeUser(db.pool);
  await db.pool.query(
    "update han_app.user_identity set phone_number = phone_number, updated_at = now() where id = $1",
    [u.id],
  );
  await db.pool.query("update han_app.client_profile set record_status = record_status where user_id = $1", [
    u.id,
  ]);
  t.is((await queueRows(db.pool, u.id)).length, 1);
});

test("changes of CRM-master fields and foreign_phone alone record nothing", async (t) => {
  const u = await makeUser(db.pool);
  await db.pool.query(
    `update han_app.client_profile
        set full_name = 'Other', citizenship = 'RU', email = 'a@b.c', foreign_phone = '+1555', source_updated_at = now()
      where user_id = $1`,
    [u.id],
  );
  t.is((await queueRows(db.pool, u.id)).length, 1);
});

test("leaving active records contact.deactivate; for identity and for profile", async (t) => {
  const a = await makeUser(db.pool);
  await db.pool.query("update han_app.user_identity set record_status = 'deleted' where id = $1", [a.id]);
  const b = await makeUser(db.pool);
  await db.pool.query("update han_app.client_profile set record_status = 'inactive' where user_id = $1", [
    b.id,
  ]);
  const ra = await queueRows(db.pool, a.id);
  const rb = await queueRows(db.pool, b.id);
  t.deepEqual(
    ra.filter((r) => r.task_type === "contact.deactivate").map((r) => r.payload_json.reason),
    ["identity_deactivated"],
  );
  t.deepEqual(
    rb.filter((r) => r.task_type === "contact.deactivate").map((r) => [r.entity_id, r.payload_json.reason]),
    [[b.id, "profile_deactivated"]],
  );
});

test("inactive -> deleted is not a deactivation again; a phone change of an inactive user records nothing", async (t) => {
  const u = await makeUser(db.pool, { status: "inactive" });
  await db.pool.query("update han_app.user_identity set record_status = 'deleted' where id = $1", [u.id]);
  await db.pool.query("update han_app.user_identity set phone_number = '+79990002233' where id = $1", [u.id]);
  t.deepEqual(await queueRows(db.pool, u.id), []);
});

test("returning to active records (or coalesces into) contact.map_or_create", async (t) => {
  const u = await makeUser(db.pool);
  await db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [u.id]);
  await db.pool.query("update han_app.user_identity set record_status = 'active' where id = $1", [u.id]);
  const rows = await queueRows(db.pool, u.id);
  const maps = rows.filter((r) => r.task_type === "contact.map_or_create");
  t.is(maps.length, 1, "the pending map_or_create absorbed the reactivation");
  // A pending row is due and unheld: the fold leaves it as it is, with the reason that made it pending.
  t.is(maps[0]?.payload_json.reason, "profile_created");
  t.is(rows.filter((r) => r.task_type === "contact.deactivate").length, 1);
});

test("a finished intent does not block a new one (partial unique dedup)", async (t) => {
  const u = await makeUser(db.pool);
  await db.pool.query(
    "update han_app.sync_queue set status = 'cancelled', cancel_reason = 'test', completed_at = now() where entity_id = $1",
    [u.id],
  );
  await db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [u.id]);
  await db.pool.query("update han_app.user_identity set record_status = 'active' where id = $1", [u.id]);
  const maps = (await queueRows(db.pool, u.id)).filter((r) => r.task_type === "contact.map_or_create");
  t.deepEqual(
    maps.map((r) => r.status),
    ["cancelled", "pending"],
  );
});

test("entity_id is always user_identity.id, also for profile events", async (t) => {
  const u = await makeUser(db.pool, { profile: false });
  const { rows } = await db.pool.query<{ id: string }>(
    "insert into han_app.client_profile (user_id, record_status) values ($1, 'active') returning id",
    [u.id],
  );
  await db.pool.query("update han_app.client_profile set record_status = 'deleted' where id = $1", [
    rows[0]?.id,
  ]);
  const all = await queueRows(db.pool, u.id);
  t.true(all.length >= 2);
  t.true(all.every((r) => r.entity_id === u.id));
  const { rows: other } = await db.pool.query("select 1 from han_app.sync_queue where entity_id = $1", [
    rows[0]?.id,
  ]);
  t.is(other.length, 0);
});

test("a rolled-back business update leaves no queue row", async (t) => {
  const c = await db.pool.connect();
  let id = "";
  try {
    await c.query("begin");
    id = (await makeUser(c)).id;
    t.is((await queueRows(c, id)).length, 1, "visible inside the transaction");
    await c.query("rollback");
  } finally {
    c.release();
  }
  t.deepEqual(await queueRows(db.pool, id), []);
});

test("SET LOCAL han.sync_suppress = 'true' records nothing, and does not leak into the next transaction", async (t) => {
  // One connection, reused like a pooled one.
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  try {
    const u = await makeUser(db.pool);
    await inTransaction(pool, async (c) => {
      await c.query("set local han.sync_suppress = 'true'");
      await c.query("update han_app.user_identity set phone_number = '+79990003344' where id = $1", [u.id]);
    });
    t.is((await queueRows(db.pool, u.id)).filter((r) => r.task_type === "contact.update").length, 0);

    const c = await pool.connect();
    try {
      const { rows } = await c.query<{ v: string | null }>(
        "select current_setting('han.sync_suppress', true) as v",
      );
      t.not(rows[0]?.v, "true", "the setting ended with its transaction");
      await c.query("update han_app.user_identity set phone_number = '+79990004455' where id = $1", [u.id]);
    } finally {
      c.release();
    }
    t.is((await queueRows(db.pool, u.id)).filter((r) => r.task_type === "contact.update").length, 1);
  } finally {
    await pool.end();
  }
});

test("an App session that sets han.sync_suppress still records its intents, also on a pooled connection after it", async (t) => {
  // One connection, reused like a pooled one, as the App's role.
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  try {
    const signup = (c: pg.PoolClient, id: string) =>
      c.query(
        `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, '+79990007788', 'active') returning id)
         insert into han_app.client_profile (user_id, full_name, record_status) select id, 'Suppressed Maybe', 'active' from u`,
        [id],
      );
    const first = randomUUID();
    await asRole(pool, "han_app_user", async (c) => {
      await c.query("set local han.sync_suppress = 'true'");
      await signup(c, first);
      await c.query("update han_app.user_identity set phone_number = '+79990007799' where id = $1", [first]);
    });
    t.deepEqual(
      (await queueRows(db.pool, first)).map((r) => r.task_type),
      ["contact.map_or_create", "contact.update"],
      "the App's own transaction",
    );
    // A session-wide setting left on the connection by an earlier App session.
    const c = await pool.connect();
    await c.query("set han.sync_suppress = 'true'");
    c.release();
    const next = randomUUID();
    await asRole(pool, "han_app_user", (cl) => signup(cl, next));
    t.deepEqual(
      (await queueRows(db.pool, next)).map((r) => r.task_type),
      ["contact.map_or_create"],
      "a later App session",
    );
  } finally {
    await pool.end();
  }
});

test("the service's own profile write records no intent (no echo)", async (t) => {
  const u = await makeUser(db.pool);
  const before = await queueRows(db.pool, u.id);
  await asRole(db.pool, "bitrix_sync_user", (c) =>
    c.query(
      `select * from bitrix_sync.apply_crm_master_fields($1, '4242', 'From The CRM', 'Narnia', 'crm@example.org', 'n',
                                                          'e', null, null, true, now(), now(), 'webhook')`,
      [u.id],
    ),
  );
  t.is(
    (
      await one<{ full_name: string }>(
        db.pool,
        "select full_name from han_app.client_profile where user_id = $1",
        [u.id],
      )
    ).full_name,
    "From The CRM",
  );
  t.deepEqual(await queueRows(db.pool, u.id), before);
});

/** A LISTEN connection on bitrix_sync_queue that records what arrives. */
async function listen(): Promise<{ c: pg.Client; got: string[]; until: (p: string) => Promise<void> }> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  const got: string[] = [];
  const waiters: Array<() => void> = [];
  c.on("notification", (n) => {
    got.push(n.payload ?? "");
    for (const w of waiters.splice(0)) w();
  });
  await c.query("listen bitrix_sync_queue");
  const until = async (payload: string) => {
    while (!got.includes(payload)) await new Promise<void>((r) => waiters.push(r));
  };
  return { c, got, until };
}

/** A NOTIFY from a transaction of its own: notifications arrive in commit order, so everything
 * committed before it has arrived once it has. */
async function marker(): Promise<string> {
  const m = `marker:${Math.random()}`;
  await db.pool.query("select pg_notify('bitrix_sync_queue', $1)", [m]);
  return m;
}

/** A sync loop's watch connection: `take()` opens a transaction and calls watch_intake() in it. */
async function watcher(opts: { idleTimeout?: string } = {}) {
  const c = new pg.Client({
    connectionString: db.url,
    ...(opts.idleTimeout ? { options: `-c idle_in_transaction_session_timeout=${opts.idleTimeout}` } : {}),
  });
  c.on("error", () => undefined);
  await c.connect();
  const pid = (await c.query<{ p: number }>("select pg_backend_pid() as p")).rows[0]?.p as number;
  return {
    c,
    pid,
    take: async () => {
      await c.query("begin");
      return (await c.query<{ w: boolean }>("select bitrix_sync.watch_intake() as w")).rows[0]?.w === true;
    },
    release: () => c.query("commit"),
    end: () => c.end().catch(() => undefined),
  };
}

/** The locks a backend holds on the intake watch's table. */
async function watchLocks(pid: number): Promise<string[]> {
  const { rows } = await db.pool.query<{ mode: string }>(
    `select mode from pg_locks
      where pid = $1 and locktype = 'relation' and relation = 'bitrix_sync.lock_intake_watch'::regclass and granted
      order by mode`,
    [pid],
  );
  return rows.map((r) => r.mode);
}

test.serial(
  "while a sync loop watches the intake, the trigger NOTIFYs bitrix_sync_queue without naming the user",
  async (t) => {
    const l = await listen();
    const w = await watcher();
    try {
      t.true(await w.take(), "the watch is free");
      const u = await makeUser(db.pool);
      const m = await marker();
      await l.until(m);
      const before = l.got.slice(0, l.got.indexOf(m));
      t.deepEqual(before, ["contact.map_or_create"]);
      t.false(l.got.some((g) => g.includes(u.id)));
      await w.release();
    } finally {
      await w.end();
      await l.c.end();
    }
  },
);

test.serial(
  "while no loop watches the intake (it is busy), intents send no NOTIFY and queue no commit",
  async (t) => {
    const l = await listen();
    try {
      const u = await makeUser(db.pool);
      await db.pool.query("update han_app.user_identity set phone_number = '+79990005566' where id = $1", [
        u.id,
      ]);
      const m = await marker();
      await l.until(m);
      t.deepEqual(l.got, [m]);
      // The intents are there all the same.
      t.deepEqual(
        (await queueRows(db.pool, u.id)).map((r) => r.task_type),
        ["contact.map_or_create", "contact.update"],
      );
    } finally {
      await l.c.end();
    }
  },
);

test.serial(
  "a loop taking the watch waits for App transactions that recorded an intent without a NOTIFY",
  async (t) => {
    const u = await makeUser(db.pool);
    const app = await db.pool.connect();
    const l = await listen();
    const w = await watcher();
    try {
      await app.query("begin");
      await app.query("update han_app.user_identity set phone_number = '+79990006677' where id = $1", [u.id]);
      // The loop's intake found nothing and goes to sleep: its watch waits for the App transaction.
      const watch = w.take();
      // It has claimed the sleeper's place (one loop watches at a time) and tries for the watch.
      while (!(await watchLocks(w.pid)).includes("ShareUpdateExclusiveLock"))
        await new Promise((r) => setTimeout(r, 10));
      // Meanwhile a new intent: the watch is not held yet, so it sends no NOTIFY, and the loop waits
      // for it too.
      const meanwhile = await makeUser(db.pool, { fold: false });
      await app.query("commit");
      t.true(await watch);
      t.deepEqual(await watchLocks(w.pid), ["ShareLock", "ShareUpdateExclusiveLock"]);
      // Once the watch is held, the intents of the waited-for transactions are visible to the look
      // the loop takes before sleeping.
      t.is(
        (await queueRows(db.pool, u.id)).filter(
          (r) => r.task_type === "contact.update" && r.status === "pending",
        ).length,
        1,
      );
      t.is((await queueRows(db.pool, meanwhile.id)).length, 1);
      // From now on every intent NOTIFYs.
      await makeUser(db.pool);
      const m = await marker();
      await l.until(m);
      t.deepEqual(l.got.slice(0, l.got.indexOf(m)), ["contact.map_or_create"]);
      // A second loop does not watch as well: one sleeper is woken for all.
      const second = await watcher();
      try {
        t.false(await second.take());
        t.deepEqual(await watchLocks(second.pid), [], "nothing held after giving up");
      } finally {
        await second.end();
      }
      await w.release();
      t.deepEqual(await watchLocks(w.pid), [], "ending the transaction releases the watch");
    } finally {
      await app.query("rollback").catch(() => undefined);
      app.release();
      await w.end();
      await l.c.end();
    }
  },
);

test.serial(
  "a long App transaction holding the watch makes the loop give up watching (it polls) after 1 s",
  async (t) => {
    const u = await makeUser(db.pool);
    const app = await db.pool.connect();
    const w = await watcher();
    try {
      await app.query("begin");
      await app.query("update han_app.user_identity set phone_number = '+79990007788' where id = $1", [u.id]);
      t.false(await w.take());
      t.deepEqual(await watchLocks(w.pid), [], "nothing held after giving up");
      await app.query("commit");
    } finally {
      await app.query("rollback").catch(() => undefined);
      app.release();
      await w.end();
    }
  },
);

test.serial(
  "the watching transaction holds back no vacuum: no transaction ID, no snapshot; a stuck loop loses the watch at its idle timeout",
  async (t) => {
    const w = await watcher({ idleTimeout: "500ms" });
    const l = await listen();
    try {
      t.true(await w.take());
      const { rows } = await db.pool.query<{ state: string; xid: string | null; xmin: string | null }>(
        "select state, backend_xid::text as xid, backend_xmin::text as xmin from pg_stat_activity where pid = $1",
        [w.pid],
      );
      t.deepEqual(rows[0], { state: "idle in transaction", xid: null, xmin: null });
      // The loop stops answering: the server ends the session, and the watch goes with it.
      for (let i = 0; (await watchLocks(w.pid)).length > 0; i++) {
        if (i > 300) t.fail("the watch was still held 3 s after the idle timeout");
        await new Promise((r) => setTimeout(r, 10));
      }
      await makeUser(db.pool);
      const m = await marker();
      await l.until(m);
      t.deepEqual(l.got.slice(0, l.got.indexOf(m)), [], "no loop watches: no NOTIFY");
    } finally {
      await w.end();
      await l.c.end();
    }
  },
);
