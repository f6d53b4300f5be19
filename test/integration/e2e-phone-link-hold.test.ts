// mapping.hold_after_phone_link end to end (docs/workflows.md "Links made by phone alone"): with the
// setting on, a link made by phone alone (B1.1, B2.1) does not copy the Contact's name, e-mail and
// citizenship into the App until a robot webhook reports a CRM change made after the link, or an
// admin confirms (confirm_phone_link). Real PostgreSQL, the emulator over HTTP, the real receiver,
// real graphile-worker. Links not made by phone alone (a created Contact, a Contact already carrying
// the user's id) are never held.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import type { StoredContact } from "../../tools/emulator/store.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { asRole, asRoleRolledBack } from "../helpers/roles.js";
import { one, rejectsWith } from "../helpers/sql-core.js";

let rig: Rig;
let app: ReturnType<typeof createApp>;
const F = SANDBOX_FIELDS;
test.before(async () => {
  rig = await startRig({ settings: { "mapping.hold_after_phone_link": true } });
  app = createApp({ pool: rig.db.pool, log: rig.runtime.log, receiver: receiverConfig(rig.runtime.config) });
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

async function robot(id: number) {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${id}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[client_endpoint]", `https://${rig.emulator.host}/rest/`],
    ["auth[server_endpoint]", "https://oauth.bitrix24.tech/rest/"],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  const res = await app.request(`/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${id}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: body.toString(),
  });
  return res.status;
}

/** Waits until every inbox row of the Contact is processed; returns their outcomes in order. */
async function inboxOutcomes(contactId: number, atLeast = 1) {
  return await waitFor(async () => {
    const { rows } = await rig.db.pool.query<{ status: string; outcome: string | null }>(
      "select status, outcome from bitrix_sync.webhook_inbox where entity_id = $1 and status <> 'coalesced' order by id",
      [String(contactId)],
    );
    return rows.length >= atLeast && rows.every((r) => r.status === "processed")
      ? rows.map((r) => r.outcome)
      : null;
  }, 20_000);
}

const profile = (userId: string) =>
  one<{ full_name: string | null; email: string | null; citizenship: string | null }>(
    rig.db.pool,
    "select full_name, email, citizenship from han_app.client_profile where user_id = $1",
    [userId],
  );

const mapping = (userId: string) =>
  one<{
    external_id: string;
    held_at: Date | null;
    held_crm_updated_at: Date | null;
    hold_released_at: Date | null;
    hold_released_by: string | null;
  }>(
    rig.db.pool,
    `select external_id, held_at, held_crm_updated_at, hold_released_at, hold_released_by
       from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'`,
    [userId],
  );

/** A free Contact with CRM-master values, and a new App user with the same phone and a name of their own. */
async function phoneOnlyLink() {
  const phone = randomPhone();
  const contact = rig.emulator.store.createContact({
    name: "Someone Else",
    phones: [{ value: phone }],
    emails: [{ valueType: "WORK", value: "someone@example.org" }],
    uf: { [F.citizenship]: "46" },
  });
  const u = await makeUser(rig.db.pool, { phone, fullName: "Own Name" });
  const wf = await finishedWorkflow(rig, u.id);
  return { u, contact, wf };
}

/** A manager's edit in the CRM, a few seconds after the link (the portal's times have whole seconds). */
function managerEdits(contact: StoredContact, name: string) {
  contact.name = name;
  contact.updatedTime = Date.now() + 3_000;
}

test.serial(
  "B1.1 with the hold on: linked, but nothing of the Contact reaches the App profile",
  async (t) => {
    const { u, contact, wf } = await phoneOnlyLink();
    t.is(wf.state, "succeeded");
    t.is(wf.outcome, "mapped_held");
    t.is(wf.step_data.branch, "B1.1");
    t.is(contact.uf[F.userId], u.id, "the Contact carries the user: the link itself is made");
    const m = await mapping(u.id);
    t.is(m.external_id, String(contact.id));
    t.truthy(m.held_at);
    t.truthy(m.held_crm_updated_at, "the read after the link is remembered");
    t.is(m.hold_released_at, null);
    t.deepEqual(await profile(u.id), { full_name: "Own Name", email: null, citizenship: null });
    const snap = await rig.db.pool.query(
      "select name_hash, email_hash, last_applied_source from bitrix_sync.contact_snapshots where contact_id = $1",
      [String(contact.id)],
    );
    t.true(
      snap.rows.every((r) => r.name_hash === null && r.email_hash === null && r.last_applied_source === null),
      "no snapshot of CRM-master values",
    );
  },
);

test.serial(
  "while held, reconciliation and a robot call caused by the link itself change nothing",
  async (t) => {
    const { u, contact } = await phoneOnlyLink();
    // The robot fires for the service's own write of the user id: the Contact read shows nothing newer.
    t.is(await robot(contact.id), 200);
    t.deepEqual(await inboxOutcomes(contact.id), ["held"]);
    // Reconciliation reads a changed Contact: held too (only a robot webhook or an admin releases it).
    managerEdits(contact, "Changed In CRM");
    const report = await reconcileContacts(rig.runtime.services, rig.runtime.settings.get().reconcile, {
      force: true,
    });
    t.is(report.status, "succeeded");
    t.true((report.outcomes.held ?? 0) >= 1);
    t.is(report.recovered, 0);
    t.deepEqual(await profile(u.id), { full_name: "Own Name", email: null, citizenship: null });
    t.is((await mapping(u.id)).hold_released_at, null);
  },
);

test.serial(
  "a robot webhook reporting a CRM change after the link releases the hold and applies everything",
  async (t) => {
    const { u, contact } = await phoneOnlyLink();
    managerEdits(contact, "Confirmed In CRM");
    t.is(await robot(contact.id), 200);
    t.deepEqual(await inboxOutcomes(contact.id), ["applied"]);
    t.deepEqual(await profile(u.id), {
      full_name: "Confirmed In CRM",
      email: "someone@example.org",
      citizenship: "Казахстан",
    });
    const m = await mapping(u.id);
    t.is(m.hold_released_by, "robot_webhook");
    t.truthy(m.hold_released_at);
    t.true(rig.logs.some((l) => l.includes('"event":"link.hold_released"')));
  },
);

test.serial(
  "an impostor on a victim's phone: the service's own write into the victim's Contact and its echo release nothing; a manager's edit of the name does",
  async (t) => {
    // The impostor signs up with the victim's phone (the App does not verify it): linked, held.
    const { u, contact } = await phoneOnlyLink();
    t.truthy((await mapping(u.id)).held_at);
    // The impostor changes the App phone: the service writes the new number into the victim's
    // Contact (App-master), which makes the Contact newer than the first read after the link.
    const seenBefore = contact.updatedTime;
    // The portal's times have whole seconds: the write comes a second later, as a person's would.
    await new Promise((r) => setTimeout(r, 1_100));
    const since = new Date();
    const newPhone = randomPhone();
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
      u.id,
      newPhone,
    ]);
    await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query(
          `select 1 from bitrix_sync.workflow_instances where user_id = $1 and created_at > $2
              and workflow_type = 'contact.update' and state = 'succeeded'`,
          [u.id, since],
        );
        return rows.length > 0;
      },
      20_000,
      "the phone written into the Contact",
    );
    t.true(
      contact.phones.some((p) => p.value === newPhone),
      "the service wrote the impostor's number into the victim's Contact",
    );
    t.true(contact.updatedTime > seenBefore, "the Contact is newer than the first read after the link");

    // The echo: the robot call the service's write causes, and reconciliation reading the Contact.
    t.is(await robot(contact.id), 200);
    t.deepEqual(await inboxOutcomes(contact.id), ["held"]);
    const report = await reconcileContacts(rig.runtime.services, rig.runtime.settings.get().reconcile, {
      force: true,
    });
    t.is(report.status, "succeeded");
    t.is((await mapping(u.id)).hold_released_at, null, "the hold stands");
    t.deepEqual(
      await profile(u.id),
      { full_name: "Own Name", email: null, citizenship: null },
      "nothing of the victim reached the impostor",
    );

    // A manager edits the Contact's name: a change a person made in the CRM ends the hold.
    managerEdits(contact, "Renamed By A Manager");
    t.is(await robot(contact.id), 200);
    t.deepEqual(await inboxOutcomes(contact.id, 2), ["held", "applied"]);
    const m = await mapping(u.id);
    t.is(m.hold_released_by, "robot_webhook");
    t.deepEqual(await profile(u.id), {
      full_name: "Renamed By A Manager",
      email: "someone@example.org",
      citizenship: "Казахстан",
    });
  },
);

test.serial("an admin confirms a held link: audited with the login, and the fields follow", async (t) => {
  const { u, contact } = await phoneOnlyLink();
  const out = await asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
    one<{ mapping_id: string; inbox_id: string }>(
      c,
      "select * from bitrix_sync.confirm_phone_link($1, 'the user confirmed their phone by call', 'ops:test')",
      [u.id],
    ),
  );
  t.truthy(out.inbox_id, "a read of the Contact is queued");
  await waitFor(async () => (await profile(u.id)).full_name === "Someone Else", 20_000, "the fields applied");
  t.deepEqual(await profile(u.id), {
    full_name: "Someone Else",
    email: "someone@example.org",
    citizenship: "Казахстан",
  });
  const m = await mapping(u.id);
  t.is(m.hold_released_by, "admin");
  const audit = await one(
    rig.db.pool,
    "select action, contact_id, reason, operator_id, db_user from bitrix_sync.admin_actions where action = 'confirm_phone_link' order by id desc limit 1",
  );
  t.deepEqual(audit, {
    action: "confirm_phone_link",
    contact_id: String(contact.id),
    reason: "the user confirmed their phone by call",
    operator_id: "ops:test",
    db_user: "postgres",
  });
});

test.serial(
  "confirm_phone_link refuses with a SQLSTATE and a hint; only the admin may call it",
  async (t) => {
    const { u } = await phoneOnlyLink();
    const confirm = (userId: string, reason = "checked", operator = "ops:test") =>
      asRoleRolledBack(rig.db.pool, "bitrix_sync_admin", (c) =>
        c.query("select * from bitrix_sync.confirm_phone_link($1, $2, $3)", [userId, reason, operator]),
      );
    let e = await rejectsWith(t, confirm(u.id, ""), "BS004");
    t.truthy(e.hint);
    const stranger = await makeUser(rig.db.pool, { phone: "89990000000" });
    e = await rejectsWith(t, confirm(stranger.id), "BS005");
    t.truthy(e.hint);
    await asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
      c.query("select * from bitrix_sync.confirm_phone_link($1, 'checked', 'ops:test')", [u.id]),
    );
    e = await rejectsWith(t, confirm(u.id), "BS002");
    t.regex(e.hint ?? "", /held_phone_links/);
    await rejectsWith(
      t,
      asRoleRolledBack(rig.db.pool, "bitrix_sync_user", (c) =>
        c.query("select * from bitrix_sync.confirm_phone_link($1, 'x-y-z', 'ops:test')", [u.id]),
      ),
      "42501",
    );
  },
);

test.serial("B2.1 is held too; a created Contact and the §4 restore by user id are not", async (t) => {
  // B2.1: two free Contacts with the phone, the newest is linked.
  const phone = randomPhone();
  rig.emulator.store.createContact({
    name: "Older",
    phones: [{ value: phone }],
    createdTime: Date.now() - 7_200_000,
  });
  rig.emulator.store.createContact({
    name: "Newer",
    phones: [{ value: phone }],
    createdTime: Date.now() - 60_000,
  });
  const a = await makeUser(rig.db.pool, { phone, fullName: "A Own" });
  const wfA = await finishedWorkflow(rig, a.id);
  t.is(wfA.step_data.branch, "B2.1");
  t.is(wfA.outcome, "mapped_held");
  t.is((await profile(a.id)).full_name, "A Own");

  // B0: the Contact is created from the App's own values: nothing to hold.
  const b = await makeUser(rig.db.pool, { phone: randomPhone(), fullName: "B Own" });
  const wfB = await finishedWorkflow(rig, b.id);
  t.is(wfB.outcome, "created");
  t.is((await mapping(b.id)).held_at, null);

  // §4: a Contact found by phone already carrying this user's id is theirs: restored and applied.
  const phoneC = randomPhone();
  const c = await makeUser(rig.db.pool, { phone: phoneC, profile: false });
  rig.emulator.store.createContact({
    name: "C In CRM",
    phones: [{ value: phoneC }],
    uf: { [F.userId]: c.id, [F.registered]: 1 },
  });
  await rig.db.pool.query(
    "insert into han_app.client_profile (user_id, full_name, record_status) values ($1, 'C Own', 'active')",
    [c.id],
  );
  const wfC = await finishedWorkflow(rig, c.id);
  t.is(wfC.outcome, "restored");
  t.is((await mapping(c.id)).held_at, null);
  t.is((await profile(c.id)).full_name, "C In CRM");
});

test.serial(
  "a deactivation and a return do not turn the phone into proof: the new link keeps the hold",
  async (t) => {
    const { u, contact } = await phoneOnlyLink();
    const since = new Date();
    await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
      u.id,
    ]);
    await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        "select 1 from bitrix_sync.entity_external_mapping where entity_id = $1 and close_reason = 'deactivated'",
        [u.id],
      );
      return rows.length > 0;
    }, 20_000);
    await rig.db.pool.query("update han_app.user_identity set record_status = 'active' where id = $1", [
      u.id,
    ]);
    const wf = await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        `select * from bitrix_sync.workflow_instances where user_id = $1 and created_at > $2
          and workflow_type = 'contact.map_or_create' and state = 'succeeded'`,
        [u.id, since],
      );
      return rows[0];
    }, 20_000);
    // Found again through the user id the held link wrote (the phone search's restore), not confirmed.
    t.is(wf.step_data.branch, "restore");
    t.is(wf.outcome, "mapped_held");
    const m = await mapping(u.id);
    t.is(m.external_id, String(contact.id));
    t.truthy(m.held_at);
    t.deepEqual(await profile(u.id), { full_name: "Own Name", email: null, citizenship: null });
  },
);

test.serial("held links show in status and metrics: count and oldest age, no IDs", async (t) => {
  const { rows } = await rig.db.pool.query<{ count: number; oldest_age_sec: number }>(
    "select count::int, oldest_age_sec::int from bitrix_sync.status_held_links",
  );
  t.true((rows[0]?.count ?? 0) >= 2, "the links still held from the tests above");
  const admin = await asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
    c.query("select * from bitrix_sync.held_phone_links"),
  );
  t.is(admin.rows.length, rows[0]?.count ?? -1);
  t.deepEqual(Object.keys(admin.rows[0] ?? {}).sort(), [
    "age_sec",
    "held_at",
    "mapping_id",
    "read_seen",
    "workflow_id",
  ]);
  const { rows: samples } = await rig.db.pool.query<{ family: string; labels: unknown; value: number }>(
    "select family, labels, value from bitrix_sync.metrics_snapshot() where family like 'bitrix_sync_phone_links_held%' order by 1",
  );
  t.deepEqual(
    samples.map((r) => [r.family, r.labels]),
    [
      ["bitrix_sync_phone_links_held", {}],
      ["bitrix_sync_phone_links_held_oldest_age_seconds", {}],
    ],
  );
  t.is(samples[0]?.value, rows[0]?.count);
  t.true((samples[1]?.value ?? -1) >= 0);
});

test.serial("with the setting off (the default), a B1.1 link applies at once as before", async (t) => {
  await rig.db.pool.query(
    "select bitrix_sync.propose_settings('{\"mapping.hold_after_phone_link\": false}', 'test') as v",
  );
  await rig.db.pool.query(
    "select bitrix_sync.validate_settings_version(max(version)) from bitrix_sync.settings_versions",
  );
  await rig.db.pool.query(
    "select bitrix_sync.activate_settings_version(max(version), 'test') from bitrix_sync.settings_versions",
  );
  const { u, wf } = await phoneOnlyLink();
  t.is(wf.outcome, "mapped");
  t.is((await mapping(u.id)).held_at, null);
  t.is((await profile(u.id)).full_name, "Someone Else");
});

test.serial("logs carry no phone numbers or names", (t) => {
  const all = rig.logs.join("");
  t.false(/\+7\d{10}/.test(all));
  for (const name of ["Someone Else", "Own Name", "Confirmed In CRM"]) t.false(all.includes(name));
});
