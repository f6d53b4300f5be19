// accept_webhooks() / accept_webhook(): the receivers' SQL entry points (sql/receiver.sql).
import test from "ava";
import { ALERT_ENTITY_TYPE_ID, inboxCount, setAlertEntityType } from "../../helpers/receiver.js";
import { forceActiveSettingValue } from "../../helpers/settings.js";
import { rejectsWith } from "../../helpers/sql-core.js";
import { createTestDb, inRolledBackTx, type TestDb } from "../../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
});
test.after.always(async () => {
  await db?.drop();
});

test.serial("accept_webhooks records accepted events and reports refusals per event", async (t) => {
  const before = await inboxCount(db.pool);
  const { rows } = await db.pool.query(
    `select ord, inbox_id is not null as written, refusal
       from bitrix_sync.accept_webhooks($1, $2, $3, $4) order by ord`,
    [
      ["contact", "alert", "alert", "contact"],
      [3, ALERT_ENTITY_TYPE_ID, 99, 1038],
      ["1", "2", "3", "4"],
      ["10.0.0.1", null, "::1", null],
    ],
  );
  t.deepEqual(rows, [
    { ord: 1, written: true, refusal: null },
    { ord: 2, written: true, refusal: null },
    { ord: 3, written: false, refusal: "entity_type" },
    { ord: 4, written: false, refusal: "entity_type" },
  ]);
  t.is(await inboxCount(db.pool), before + 2);
  const ips = await db.pool.query<{ ip: string | null }>(
    "select host(source_ip) as ip from bitrix_sync.webhook_inbox order by id desc limit 2",
  );
  t.deepEqual(
    ips.rows.map((r) => r.ip),
    [null, "10.0.0.1"],
  );
});

test.serial(
  "accept_webhook raises BS020 for another entity type and BS021 without alerts.entity_type_id",
  async (t) => {
    await inRolledBackTx(db.pool, async (c) => {
      const e = await t.throwsAsync(c.query("select bitrix_sync.accept_webhook('contact', 4, '1', null)"));
      t.is((e as { code?: string }).code, "BS020");
    });
    await setAlertEntityType(db.pool, null);
    try {
      await inRolledBackTx(db.pool, async (c) => {
        const e = await t.throwsAsync(
          c.query(`select bitrix_sync.accept_webhook('alert', ${ALERT_ENTITY_TYPE_ID}, '1')`),
        );
        t.is((e as { code?: string }).code, "BS021");
      });
    } finally {
      await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
    }
    const { rows } = await db.pool.query<{ id: string }>(
      "select bitrix_sync.accept_webhook('contact', 3, '77') as id",
    );
    t.truthy(rows[0]?.id);
  },
);

test.serial(
  "an unknown receiver or a malformed ID is refused alone; only arrays of different lengths fail the call",
  async (t) => {
    const before = await inboxCount(db.pool);
    const { rows } = await db.pool.query(
      "select ord, inbox_id is not null as written, refusal from bitrix_sync.accept_webhooks($1, $2, $3, $4) order by ord",
      [
        ["contact", "deal", "contact", "contact"],
        [3, 2, 3, 3],
        ["1", "2", "0x10", "21"],
        [null, null, null, null],
      ],
    );
    t.deepEqual(rows, [
      { ord: 1, written: true, refusal: null },
      { ord: 2, written: false, refusal: "unknown_receiver" },
      { ord: 3, written: false, refusal: "entity_id" },
      { ord: 4, written: true, refusal: null },
    ]);
    t.is(await inboxCount(db.pool), before + 2);
    await rejectsWith(
      t,
      db.pool.query("select * from bitrix_sync.accept_webhooks($1, $2, $3, $4)", [
        ["contact"],
        [3, 3],
        ["1"],
        [null],
      ]),
      "BS004",
    );
    await rejectsWith(t, db.pool.query("select bitrix_sync.accept_webhook('deal', 2, '1')"), "BS022");
    await rejectsWith(t, db.pool.query("select bitrix_sync.accept_webhook('contact', 3, 'abc')"), "BS004");
    t.is(await inboxCount(db.pool), before + 2, "nothing of the failed calls was written");
  },
);

test.serial(
  "an active alerts.entity_type_id written as 1036.0 still works; one beyond int4 refuses alert events only",
  async (t) => {
    const call = () =>
      db.pool.query(
        "select ord, inbox_id is not null as written, refusal from bitrix_sync.accept_webhooks($1, $2, $3, $4) order by ord",
        [
          ["contact", "alert", "contact"],
          [3, 1036, 3],
          ["31", "32", "33"],
          [null, null, null],
        ],
      );
    // A version activated before integers were normalised: jsonb keeps "1036.0", and a plain
    // ::integer cast of it fails for every call holding an alert event.
    let restore = await forceActiveSettingValue(db.pool, "alerts.entity_type_id", "1036.0");
    try {
      const { rows } = await call();
      t.deepEqual(
        rows.map((r) => r.refusal),
        [null, null, null],
      );
    } finally {
      await restore();
    }
    restore = await forceActiveSettingValue(db.pool, "alerts.entity_type_id", "3000000000");
    try {
      const { rows } = await call();
      t.deepEqual(rows, [
        { ord: 1, written: true, refusal: null },
        { ord: 2, written: false, refusal: "alert_config_invalid" },
        { ord: 3, written: true, refusal: null },
      ]);
      await rejectsWith(t, db.pool.query("select bitrix_sync.accept_webhook('alert', 1036, '34')"), "BS023");
    } finally {
      await restore();
    }
  },
);

test.serial(
  "the runtime role executes accept_webhooks; the admin role re-records with accept_webhook",
  async (t) => {
    const { rows } = await db.pool.query<{
      fn: string;
      user_ok: boolean;
      admin_ok: boolean;
      public_ok: boolean;
    }>(
      `select p.oid::regprocedure::text as fn,
            has_function_privilege('bitrix_sync_user', p.oid, 'execute') as user_ok,
            has_function_privilege('bitrix_sync_admin', p.oid, 'execute') as admin_ok,
            exists (select 1 from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                     where a.grantee = 0 and a.privilege_type = 'EXECUTE') as public_ok
       from pg_proc p where p.proname in ('accept_webhook', 'accept_webhooks') order by 1`,
    );
    t.deepEqual(rows, [
      {
        fn: "bitrix_sync.accept_webhook(text,integer,text,inet)",
        user_ok: false,
        admin_ok: true,
        public_ok: false,
      },
      {
        fn: "bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])",
        user_ok: true,
        admin_ok: false,
        public_ok: false,
      },
    ]);
    const c = await db.pool.connect();
    try {
      await c.query("begin");
      await c.query("set local role bitrix_sync_admin");
      const { rows: r } = await c.query<{ id: string }>(
        "select bitrix_sync.accept_webhook('contact', 3, '4711') as id",
      );
      t.truthy(r[0]?.id, "security definer: no table right needed");
    } finally {
      await c.query("rollback");
      c.release();
    }
  },
);

test.serial("accept_webhooks wakes the sync loop once per receiver and call, not once per row", async (t) => {
  const listener = await db.pool.connect();
  const seen: string[] = [];
  listener.on("notification", (n) => {
    if (n.channel === "bitrix_sync_webhooks") seen.push(n.payload ?? "");
  });
  try {
    await listener.query("listen bitrix_sync_webhooks");
    await db.pool.query("select * from bitrix_sync.accept_webhooks($1, $2, $3, $4)", [
      ["contact", "contact", "alert", "contact"],
      [3, 3, ALERT_ENTITY_TYPE_ID, 3],
      ["11", "12", "13", "14"],
      [null, null, null, null],
    ]);
    await new Promise((r) => setTimeout(r, 200));
    t.deepEqual(seen.sort(), ["alert", "contact"]);
  } finally {
    await listener.query("unlisten *");
    listener.release();
  }
});
