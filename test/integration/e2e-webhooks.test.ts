// CRM -> App through the robot webhook (§5.5, §10.1): the real receiver, the inbox, the processing
// lane of the sync loop, the emulator over HTTP. No echo, no harm from duplicates or late events.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_ALERT_TOKEN,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { setSettings } from "../helpers/settings.js";

let rig: Rig;
let app: ReturnType<typeof createApp>;
const F = SANDBOX_FIELDS;
test.before(async () => {
  rig = await startRig();
  await setSettings(rig.db, {
    "worker.poll_interval_ms": 300,
    "batch.max_wait_ms": 50,
    "limiter.burst": 10,
    "limiter.refill_per_sec": 20,
    ...DEFAULT_ALERT_SETTINGS,
  });
  await rig.runtime.settings.refresh();
  app = createApp({ pool: rig.db.pool, log: rig.runtime.log, receiver: receiverConfig(rig.runtime.config) });
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

async function robot(
  receiver: "contact" | "alert",
  id: number,
  documentType = "CCrmDocumentContact",
  prefix = "CONTACT",
) {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", documentType],
    ["document_id[2]", `${prefix}_${id}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[client_endpoint]", `https://${rig.emulator.host}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  const token = receiver === "contact" ? TEST_CONTACT_TOKEN : TEST_ALERT_TOKEN;
  const res = await app.request(`/bitrix/sync/webhook/${receiver}?token=${token}&ID=${id}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: body.toString(),
  });
  return res.status;
}

async function linkedUser() {
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = rig.emulator.store.contacts.get(Number(rows[0]?.external_id));
  if (!contact) throw new Error("not linked");
  return { u, contact };
}

async function inboxDone(entityId: number) {
  return await waitFor(async () => {
    const { rows } = await rig.db.pool.query(
      "select status, outcome from bitrix_sync.webhook_inbox where entity_id = $1 order by id",
      [String(entityId)],
    );
    return rows.length > 0 && rows.every((r) => r.status === "processed") ? rows : null;
  });
}

async function profile(userId: string) {
  const { rows } = await rig.db.pool.query(
    "select full_name, email, citizenship from han_app.client_profile where user_id = $1",
    [userId],
  );
  return rows[0];
}

test.serial(
  "a robot webhook brings CRM-master fields into the App, with no echo back to the CRM",
  async (t) => {
    const { u, contact } = await linkedUser();
    contact.name = "Viktor";
    contact.emails = [
      rig.emulator.store.newMulti("HOME", "v@home.example"),
      rig.emulator.store.newMulti("WORK", "v@work.example"),
    ];
    contact.uf[F.citizenship] = "47";
    rig.emulator.store.touch(contact);
    t.is(await robot("contact", contact.id), 200);
    t.deepEqual(await inboxDone(contact.id), [{ status: "processed", outcome: "applied" }]);
    t.deepEqual(await profile(u.id), {
      full_name: "Viktor",
      email: "v@work.example",
      citizenship: "Узбекистан",
    });
    const snap = await rig.db.pool.query(
      "select last_applied_source from bitrix_sync.contact_snapshots where contact_id = $1",
      [String(contact.id)],
    );
    t.is(snap.rows[0].last_applied_source, "webhook");
    const q = await rig.db.pool.query(
      "select count(*)::int as n from han_app.sync_queue where entity_id = $1",
      [u.id],
    );
    t.is(q.rows[0].n, 1, "only the original intent: applying CRM-master fields enqueued nothing");
  },
);

test.serial("an absent CRM value clears the App field; NAME alone is the full name", async (t) => {
  const { u, contact } = await linkedUser();
  contact.name = "Olga";
  contact.lastName = "Ivanova";
  contact.emails = [];
  delete contact.uf[F.citizenship];
  rig.emulator.store.touch(contact);
  await robot("contact", contact.id);
  await inboxDone(contact.id);
  t.deepEqual(await profile(u.id), { full_name: "Olga", email: null, citizenship: null });
});

test.serial("duplicate webhooks of one Contact are read once", async (t) => {
  const { u, contact } = await linkedUser();
  await rig.stopWorker();
  contact.name = "Dup";
  rig.emulator.store.touch(contact);
  for (let i = 0; i < 3; i++) t.is(await robot("contact", contact.id), 200);
  const reads = () => rig.emulator.log.filter((e) => e.commands.includes("crm.contact.list")).length;
  const before = reads();
  await rig.startWorker();
  const rows = await inboxDone(contact.id);
  t.is(rows.length, 3);
  t.is(rows.filter((r) => r.outcome === "applied").length, 1);
  t.is(rows.filter((r) => r.outcome === "coalesced").length, 2);
  t.is(reads() - before, 1, "one CRM read for three events");
  t.is((await profile(u.id)).full_name, "Dup");
});

test.serial("a late read older than what the App holds changes nothing", async (t) => {
  const { u, contact } = await linkedUser();
  contact.name = "Newest";
  contact.updatedTime = Math.floor(Date.now() / 1000) * 1000 + 60_000;
  await robot("contact", contact.id);
  await inboxDone(contact.id);
  // The portal now serves an older state (e.g. an event delivered late after a newer one).
  contact.name = "Older";
  contact.updatedTime -= 120_000;
  await robot("contact", contact.id);
  const rows = await inboxDone(contact.id);
  t.is(rows.at(-1)?.outcome, "stale");
  t.is((await profile(u.id)).full_name, "Newest");
});

test.serial("user_id mismatch: business alert, profile untouched", async (t) => {
  const { u, contact } = await linkedUser();
  const before = await profile(u.id);
  contact.uf[F.userId] = "00000000-0000-4000-8000-000000000000";
  contact.name = "Someone Else";
  rig.emulator.store.touch(contact);
  await robot("contact", contact.id);
  const rows = await inboxDone(contact.id);
  t.is(rows.at(-1)?.outcome, "user_id_mismatch");
  t.deepEqual(await profile(u.id), before);
  const a = await rig.db.pool.query("select alert_type from bitrix_sync.business_alerts where user_id = $1", [
    u.id,
  ]);
  t.deepEqual(
    a.rows.map((r) => r.alert_type),
    ["user_id_mismatch"],
  );
});

test.serial("Contact not found: mapping broken, profile kept and marked stale, alert", async (t) => {
  const { u, contact } = await linkedUser();
  const before = await profile(u.id);
  rig.emulator.store.contacts.delete(contact.id);
  await robot("contact", contact.id);
  const rows = await inboxDone(contact.id);
  t.is(rows.at(-1)?.outcome, "contact_not_found");
  t.deepEqual(await profile(u.id), before, "not cleared");
  const m = await rig.db.pool.query(
    "select status from bitrix_sync.entity_external_mapping where entity_id = $1",
    [u.id],
  );
  t.deepEqual(m.rows, [{ status: "broken" }]);
  const s = await rig.db.pool.query("select stale from bitrix_sync.contact_snapshots where contact_id = $1", [
    String(contact.id),
  ]);
  t.true(s.rows[0].stale);
});

test.serial("a webhook for an unmapped Contact is acknowledged without touching the App", async (t) => {
  const stranger = rig.emulator.store.createContact({ name: "Stranger" });
  t.is(await robot("contact", stranger.id), 200);
  const rows = await inboxDone(stranger.id);
  t.deepEqual(rows, [{ status: "processed", outcome: "unknown_mapping" }]);
});

test.serial(
  "alerts reach the smart process; a terminal stage set in the CRM closes the local alert",
  async (t) => {
    const phone = randomPhone();
    const other = await makeUser(rig.db.pool, { phone: randomPhone() });
    rig.emulator.store.createContact({ phones: [{ value: phone }], uf: { [F.userId]: other.id } });
    const u = await makeUser(rig.db.pool, { phone });
    await finishedWorkflow(rig, u.id);
    const alert = await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        "select id, item_id, alert_number from bitrix_sync.business_alerts where user_id = $1 and item_id is not null",
        [u.id],
      );
      return rows[0];
    });
    const item = rig.emulator.store.items.get(Number(alert.item_id));
    t.truthy(item);
    t.is(item?.stageId, "DT1040_7:NEW");
    t.regex(item?.title ?? "", new RegExp(`#${alert.alert_number}`));
    if (item) {
      item.stageId = "DT1040_7:FAIL";
      rig.emulator.store.touch(item);
    }
    t.is(
      await robot(
        "alert",
        Number(alert.item_id),
        "Bitrix\\Crm\\Integration\\BizProc\\Document\\Dynamic",
        "DYNAMIC_1040",
      ),
      200,
    );
    const closed = await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        "select status, stage_id from bitrix_sync.business_alerts where id = $1",
        [alert.id],
      );
      return rows[0].status !== "open" ? rows[0] : null;
    });
    t.deepEqual(closed, { status: "closed", stage_id: "DT1040_7:FAIL" });
  },
);

test.serial("an alert whose item was deleted in the CRM becomes remote_missing", async (t) => {
  const u = await makeUser(rig.db.pool, { phone: "not-a-phone" });
  await finishedWorkflow(rig, u.id);
  const alert = await waitFor(async () => {
    const { rows } = await rig.db.pool.query(
      "select id, item_id from bitrix_sync.business_alerts where user_id = $1 and item_id is not null",
      [u.id],
    );
    return rows[0];
  });
  rig.emulator.store.items.delete(Number(alert.item_id));
  await robot(
    "alert",
    Number(alert.item_id),
    "Bitrix\\Crm\\Integration\\BizProc\\Document\\Dynamic",
    "DYNAMIC_1040",
  );
  const a = await waitFor(async () => {
    const { rows } = await rig.db.pool.query("select status from bitrix_sync.business_alerts where id = $1", [
      alert.id,
    ]);
    return rows[0].status === "remote_missing" ? rows[0] : null;
  });
  t.is(a.status, "remote_missing");
});
