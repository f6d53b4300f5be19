// contact.map_or_create end to end (§5.1): real PostgreSQL, the emulator over HTTP, real
// graphile-worker. Each branch checks the Contacts in the emulator, mapping rows, snapshots, alerts.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { finishedWorkflow, type Rig, startRig } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

const F = SANDBOX_FIELDS;

async function mappings(userId: string) {
  const { rows } = await rig.db.pool.query(
    "select external_id, status, close_reason from bitrix_sync.entity_external_mapping where entity_id = $1 order by opened_at",
    [userId],
  );
  return rows;
}

async function alerts(userId: string) {
  const { rows } = await rig.db.pool.query(
    "select alert_type, status, occurrence_count, candidate_contact_ids, selected_contact_id from bitrix_sync.business_alerts where user_id = $1 order by id",
    [userId],
  );
  return rows;
}

test.serial(
  "B0: no Contact with the phone -> one Contact created with phone, user_id and the active flag",
  async (t) => {
    const u = await makeUser(rig.db.pool, { fullName: "Anna" });
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.state, "succeeded");
    t.is(wf.outcome, "created");
    const created = [...rig.emulator.store.contacts.values()].filter((c) => c.uf[F.userId] === u.id);
    t.is(created.length, 1);
    const c = created[0];
    t.deepEqual(
      c?.phones.map((p) => p.value),
      [u.phone],
    );
    t.is(c?.uf[F.registered], 1);
    t.is(c?.name, "Anna");
    t.deepEqual(await mappings(u.id), [{ external_id: String(c?.id), status: "active", close_reason: null }]);
    const snap = await rig.db.pool.query(
      "select last_applied_source, phone_hash is not null as ph from bitrix_sync.contact_snapshots where contact_id = $1",
      [String(c?.id)],
    );
    t.deepEqual(snap.rows, [{ last_applied_source: "app_create", ph: true }]);
    const q = await rig.db.pool.query("select status from han_app.sync_queue where entity_id = $1", [u.id]);
    t.deepEqual(
      q.rows.map((r) => r.status),
      ["processed"],
    );
  },
);

test.serial(
  "B1.1: one free Contact -> user_id and flag written into it, mapping created, CRM-master fields applied",
  async (t) => {
    const phone = randomPhone();
    const existing = rig.emulator.store.createContact({
      name: "Boris CRM",
      phones: [{ value: phone }],
      emails: [
        { valueType: "HOME", value: "home@example.org" },
        { valueType: "WORK", value: "work@example.org" },
      ],
      uf: { [F.citizenship]: "46" },
    });
    const u = await makeUser(rig.db.pool, { phone, fullName: "Boris App" });
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.outcome, "mapped");
    t.is(existing.uf[F.userId], u.id);
    t.is(existing.uf[F.registered], 1);
    t.is(
      [...rig.emulator.store.contacts.values()].filter((c) => c.phones.some((p) => p.value === phone)).length,
      1,
    );
    t.deepEqual(await mappings(u.id), [
      { external_id: String(existing.id), status: "active", close_reason: null },
    ]);
    const p = await rig.db.pool.query(
      "select full_name, email, citizenship from han_app.client_profile where user_id = $1",
      [u.id],
    );
    t.deepEqual(p.rows[0], { full_name: "Boris CRM", email: "work@example.org", citizenship: "Казахстан" });
    // Applying CRM-master fields enqueued nothing (no echo).
    const q = await rig.db.pool.query(
      "select count(*)::int as n from han_app.sync_queue where entity_id = $1",
      [u.id],
    );
    t.is(q.rows[0].n, 1);
  },
);

test.serial(
  "B1.2: the one Contact belongs to another active user -> a new Contact and a business alert",
  async (t) => {
    const phone = randomPhone();
    const other = await makeUser(rig.db.pool, { phone: randomPhone() });
    const taken = rig.emulator.store.createContact({
      phones: [{ value: phone }],
      uf: { [F.userId]: other.id, [F.registered]: 1 },
    });
    const u = await makeUser(rig.db.pool, { phone });
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.outcome, "created");
    t.is(taken.uf[F.userId], other.id, "the other user's Contact is untouched");
    const mine = [...rig.emulator.store.contacts.values()].filter((c) => c.uf[F.userId] === u.id);
    t.is(mine.length, 1);
    t.not(mine[0]?.id, taken.id);
    const a = await alerts(u.id);
    t.is(a.length, 1);
    t.like(a[0], {
      alert_type: "contact_bound_to_other_user",
      status: "open",
      selected_contact_id: String(taken.id),
    });
  },
);

test.serial(
  "B2.1: several Contacts, the newest is free -> it is chosen (createdAt, then ID) and duplicates are reported",
  async (t) => {
    const phone = randomPhone();
    const base = Date.now() - 3_600_000;
    const old = rig.emulator.store.createContact({ phones: [{ value: phone }], createdTime: base });
    const tieLow = rig.emulator.store.createContact({
      phones: [{ value: phone }],
      createdTime: base + 60_000,
    });
    const tieHigh = rig.emulator.store.createContact({
      phones: [{ value: phone }],
      createdTime: base + 60_000,
    });
    const u = await makeUser(rig.db.pool, { phone });
    await finishedWorkflow(rig, u.id);
    t.is(tieHigh.uf[F.userId], u.id);
    t.falsy(tieLow.uf[F.userId]);
    t.falsy(old.uf[F.userId]);
    t.deepEqual(await mappings(u.id), [
      { external_id: String(tieHigh.id), status: "active", close_reason: null },
    ]);
    const a = await alerts(u.id);
    t.is(a.length, 1);
    t.is(a[0].alert_type, "duplicate_contacts");
    t.deepEqual([...a[0].candidate_contact_ids].sort(), [old.id, tieLow.id, tieHigh.id].map(String).sort());
  },
);

test.serial(
  "B2.2: several Contacts, the newest belongs to another active user -> new Contact, alert lists every candidate",
  async (t) => {
    const phone = randomPhone();
    const other = await makeUser(rig.db.pool, { phone: randomPhone() });
    const older = rig.emulator.store.createContact({
      phones: [{ value: phone }],
      createdTime: Date.now() - 7_200_000,
    });
    const newest = rig.emulator.store.createContact({
      phones: [{ value: phone }],
      createdTime: Date.now() - 60_000,
      uf: { [F.userId]: other.id },
    });
    const u = await makeUser(rig.db.pool, { phone });
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.outcome, "created");
    t.falsy(older.uf[F.userId], "no older Contact is taken instead");
    const a = await alerts(u.id);
    t.is(a[0]?.alert_type, "contact_bound_to_other_user");
    t.deepEqual([...a[0].candidate_contact_ids].sort(), [older.id, newest.id].map(String).sort());
  },
);

test.serial("a candidate already carrying this user_id restores the mapping without a create", async (t) => {
  const phone = randomPhone();
  const u = await makeUser(rig.db.pool, { phone, profile: false });
  const mine = rig.emulator.store.createContact({
    phones: [{ value: phone }],
    uf: { [F.userId]: u.id, [F.registered]: 0 },
  });
  const before = rig.emulator.store.contacts.size;
  await rig.db.pool.query(
    "insert into han_app.client_profile (user_id, record_status) values ($1, 'active')",
    [u.id],
  );
  const wf = await finishedWorkflow(rig, u.id);
  t.is(wf.outcome, "restored");
  t.is(rig.emulator.store.contacts.size, before, "no Contact created");
  t.is(mine.uf[F.registered], 1, "the differing flag was fixed");
  t.deepEqual(await mappings(u.id), [{ external_id: String(mine.id), status: "active", close_reason: null }]);
});

test.serial(
  "a Contact holding the user_id of a deleted user is taken over; the old mapping is closed, history kept",
  async (t) => {
    const phone = randomPhone();
    const gone = await makeUser(rig.db.pool, { phone: randomPhone() });
    const c = rig.emulator.store.createContact({
      phones: [{ value: phone }],
      uf: { [F.userId]: gone.id, [F.registered]: 1 },
    });
    await rig.db.pool.query("select bitrix_sync.open_mapping($1, $2, null)", [gone.id, String(c.id)]);
    await rig.db.pool.query("update han_app.user_identity set record_status = 'deleted' where id = $1", [
      gone.id,
    ]);
    await finishedWorkflow(rig, gone.id);
    const u = await makeUser(rig.db.pool, { phone });
    await finishedWorkflow(rig, u.id);
    t.is(c.uf[F.userId], u.id);
    const hist = await rig.db.pool.query(
      "select entity_id, status from bitrix_sync.entity_external_mapping where external_id = $1 order by opened_at",
      [String(c.id)],
    );
    t.deepEqual(
      hist.rows.map((r) => [r.entity_id, r.status]),
      [
        [gone.id, "closed"],
        [u.id, "active"],
      ],
    );
  },
);

test.serial(
  "an invalid phone parks the workflow in waiting_manual with an alert, not in the DLQ",
  async (t) => {
    const u = await makeUser(rig.db.pool, { phone: "89991234567" });
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.state, "waiting_manual");
    t.is(wf.last_error_code, "invalid_phone");
    t.deepEqual(
      (await alerts(u.id)).map((a) => a.alert_type),
      ["invalid_phone"],
    );
    const dlq = await rig.db.pool.query("select count(*)::int as n from bitrix_sync.technical_dead_letters");
    t.is(dlq.rows[0].n, 0);
    // Fixing the phone at the source resumes the workflow.
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
      u.id,
      randomPhone(),
    ]);
    const done = await finishedWorkflow(rig, u.id);
    t.is(done.state, "succeeded");
  },
);

test.serial("logs carry no phone numbers, names or the webhook secret", (t) => {
  const all = rig.logs.join("");
  t.false(all.includes(rig.emulator.secret));
  t.false(/\+7\d{10}/.test(all));
  t.false(all.includes("Boris"));
});
