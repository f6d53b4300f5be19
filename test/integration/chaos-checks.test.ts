// The chaos suite's invariant checks (scripts/chaos/checks.ts) on an empty installation and the
// emulator: a phone number a manager added and the service later removed is reported, one still on
// its Contact is not; a business alert must be mirrored by exactly one smart-process item, and its
// status must agree with the item's stage; a reconciliation run holds a lease worth reporting only past
// reconcile.lease_sec. Serial: each test checks the whole installation.
import test from "ava";
import { ALERT_NUMBER_FIELD, ALERT_PROCESS, checkInvariants } from "../../scripts/chaos/checks.js";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type Emulator, startEmulator } from "../../tools/emulator/server.js";
import type { StoredItem } from "../../tools/emulator/store.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
let emulator: Emulator;

test.before(async () => {
  db = await createTestDb();
  emulator = await startEmulator({ fields: SANDBOX_FIELDS });
});

test.after.always(async () => {
  await emulator?.close();
  await db?.drop();
});

test.serial("a number a manager added must still be on its Contact", async (t) => {
  const contact = emulator.store.createContact({
    name: "Chaos Checkova",
    phones: [
      { valueType: "MOBILE", value: "+79990000001" },
      { valueType: "WORK", value: "+7 999 000-00-02" },
    ],
  });
  const kept = await checkInvariants(
    db.pool,
    emulator,
    SANDBOX_FIELDS,
    new Set(),
    new Map([[contact.id, new Set(["+79990000002"])]]),
  );
  t.deepEqual(kept.violations, [], "the number is there, written another way");

  contact.phones = contact.phones.filter((p) => p.valueType !== "WORK");
  const lost = await checkInvariants(
    db.pool,
    emulator,
    SANDBOX_FIELDS,
    new Set(),
    new Map([[contact.id, new Set(["+79990000002"])]]),
  );
  t.deepEqual(lost.violations, [`Contact ${contact.id} lost a phone number a manager added`]);
  t.false(lost.violations.join(" ").includes("79990000002"), "the report names no number");
});

test.serial("a business alert must be mirrored by exactly one smart-process item", async (t) => {
  const { rows } = await db.pool.query<{ id: string; n: string }>(
    `select r.id::text as id, r.alert_number::text as n
       from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, null, null, null, '[]', '{}', null) r`,
    ["c".repeat(64)],
  );
  const alert = rows[0];
  if (!alert) return t.fail("no alert raised");
  const check = async () => (await checkInvariants(db.pool, emulator, SANDBOX_FIELDS)).violations;

  const pending = await check();
  t.true(pending.includes(`alert ${alert.n} is not mirrored (pending, no item)`));
  t.true(pending.includes(`alert ${alert.n} has 0 items in the portal`));
  t.true(pending.includes("1 alerts rows not settled"));

  const process = emulator.store.smartProcess(1040);
  if (!process) return t.fail("the emulator has no smart process 1040");
  const item = emulator.store.createItem(process, { title: "alert", uf: { [ALERT_NUMBER_FIELD]: alert.n } });
  await db.pool.query("select bitrix_sync.record_alert_item($1, $2, $3)", [alert.id, item.id, item.stageId]);
  await db.pool.query("update bitrix_sync.business_alerts set crm_sync_status = 'synced' where id = $1", [
    alert.id,
  ]);
  const mirrored = await checkInvariants(db.pool, emulator, SANDBOX_FIELDS);
  t.deepEqual(mirrored.violations, []);
  t.is(mirrored.alerts, 1);
  t.is(mirrored.alertItems, 1);

  emulator.store.createItem(process, { title: "alert", uf: { [ALERT_NUMBER_FIELD]: alert.n } });
  t.deepEqual(await check(), [`alert ${alert.n} has 2 items in the portal`]);
});

test.serial("an alert's status must agree with its item's stage", async (t) => {
  const process = emulator.store.smartProcess(ALERT_PROCESS.entityTypeId);
  if (!process) return t.fail("the emulator has no alert smart process");
  const { resolved, closed } = ALERT_PROCESS.stages;
  // Two mirrored alerts, each with its item in the first open stage.
  const alerts: Array<{ id: string; n: string; item: StoredItem }> = [];
  for (const fingerprint of ["d".repeat(64), "e".repeat(64)]) {
    const { rows } = await db.pool.query<{ id: string; n: string }>(
      `select r.id::text as id, r.alert_number::text as n
         from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, null, null, null, '[]', '{}', null) r`,
      [fingerprint],
    );
    const a = rows[0];
    if (!a) return t.fail("no alert raised");
    const item = emulator.store.createItem(process, { title: "alert", uf: { [ALERT_NUMBER_FIELD]: a.n } });
    await db.pool.query("select bitrix_sync.record_alert_item($1, $2, $3)", [a.id, item.id, item.stageId]);
    await db.pool.query("update bitrix_sync.business_alerts set crm_sync_status = 'synced' where id = $1", [
      a.id,
    ]);
    alerts.push({ ...a, item });
  }
  const [first, second] = alerts as [(typeof alerts)[0], (typeof alerts)[0]];
  // The violations about these two alerts (the test before leaves one of its own).
  const about = async () =>
    (await checkInvariants(db.pool, emulator, SANDBOX_FIELDS)).violations.filter(
      (x) => x.startsWith(`alert ${first.n} `) || x.startsWith(`alert ${second.n} `),
    );
  t.deepEqual(await about(), [], "open alerts, items in an open stage");

  // A manager resolved the first item; the service has not seen it yet.
  first.item.stageId = resolved;
  t.deepEqual(await about(), [
    `alert ${first.n} is still open; its item ${first.item.id} is in the terminal stage ${resolved}`,
  ]);
  await db.pool.query("select bitrix_sync.finish_business_alert($1, 'resolved', $2)", [first.id, resolved]);
  t.deepEqual(await about(), [], "the webhook (or the reconciliation) resolved it");
  // A manager closed it a moment after the service resolved it: a finished alert stays finished.
  first.item.stageId = closed;
  t.deepEqual(await about(), []);

  // The second alert finished while its item is still open, then closed with a resolved item.
  await db.pool.query("select bitrix_sync.finish_business_alert($1, 'closed', $2)", [second.id, closed]);
  t.deepEqual(await about(), [
    `alert ${second.n} is closed; its item ${second.item.id} is still in the open stage ${second.item.stageId}`,
  ]);
  second.item.stageId = resolved;
  t.deepEqual(await about(), [`alert ${second.n} is closed; its item ${second.item.id} is in ${resolved}`]);
  second.item.stageId = closed;
  t.deepEqual(await about(), []);
});

test.serial("a reconciliation run within its lease is live; one past it was left behind", async (t) => {
  const leases = async () =>
    (await checkInvariants(db.pool, emulator, SANDBOX_FIELDS)).violations.filter((v) =>
      v.includes("reconciliation"),
    );
  await db.pool.query(
    `insert into bitrix_sync.reconciliation_cursors (job_type, last_run_status, last_run_started_at, lease_token)
     values ('contacts', 'running', now(), gen_random_uuid())`,
  );
  t.deepEqual(await leases(), [], "a run the crontab started a moment ago");
  await db.pool.query(
    `update bitrix_sync.reconciliation_cursors
        set last_run_started_at = now() - make_interval(secs => 1 + (bitrix_sync._active_setting('reconcile.lease_sec') #>> '{}')::double precision)
      where job_type = 'contacts'`,
  );
  t.deepEqual(await leases(), ["1 reconciliation rows still hold a lease"]);
  await db.pool.query("delete from bitrix_sync.reconciliation_cursors where job_type = 'contacts'");
});
