// Keyed hashes over personal data (issue 10, finding 6; src/hash.ts) end to end: what the service
// stores is an HMAC under BITRIX_SYNC_HASH_KEY, never the plain SHA-256 of a phone, name or e-mail;
// and rows written before the key existed (plain SHA-256, the legacy form) keep working, so the
// switch rewrites no Contact: a phone change overwrites the same CRM entry, an unchanged user costs
// no CRM write, and reconciliation counts no false recovery.
import test from "ava";
import { legacySha256, piiHash } from "../../src/hash.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

async function linked(opts: { fullName?: string } = {}) {
  const u = await makeUser(rig.db.pool, { phone: randomPhone(), ...opts });
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = rig.emulator.store.contacts.get(Number(rows[0]?.external_id));
  if (!contact) throw new Error("no Contact linked");
  return { u, contact };
}

async function snapshot(contactId: number) {
  const { rows } = await rig.db.pool.query<{
    phone_hash: string | null;
    name_hash: string | null;
    email_hash: string | null;
  }>("select phone_hash, name_hash, email_hash from bitrix_sync.contact_snapshots where contact_id = $1", [
    String(contactId),
  ]);
  return rows[0];
}

/** Turns the user's stored hashes into what the service wrote before the key existed. */
async function makeLegacy(userId: string, contactId: number, values: { phone: string; name: string | null }) {
  await rig.db.pool.query(
    `update bitrix_sync.contact_snapshots
        set phone_hash = $2, name_hash = $3, email_hash = null
      where contact_id = $1`,
    [String(contactId), legacySha256(values.phone), values.name === null ? null : legacySha256(values.name)],
  );
  // What the old code stored as content hash: a 64-character hex digest.
  await rig.db.pool.query("update bitrix_sync.workflow_instances set content_hash = $2 where user_id = $1", [
    userId,
    legacySha256(`legacy-content-${userId}`),
  ]);
}

async function newestWorkflow(userId: string, after: Date) {
  return await waitFor(async () => {
    const { rows } = await rig.db.pool.query(
      `select * from bitrix_sync.workflow_instances
        where user_id = $1 and created_at > $2 and state in ('succeeded','failed','waiting_manual')
        order by created_at desc limit 1`,
      [userId, after],
    );
    return rows[0];
  });
}

test.serial("stored hashes are keyed: never the plain SHA-256 of a phone, name or e-mail", async (t) => {
  const { u, contact } = await linked({ fullName: "Keyed Hash" });
  const snap = await snapshot(contact.id);
  t.is(snap?.phone_hash, piiHash(u.phone));
  t.regex(snap?.phone_hash ?? "", /^v2:[A-Za-z0-9_-]{43}$/);
  t.is(snap?.name_hash, piiHash("Keyed Hash"));
  // Nothing anywhere in the service's tables holds the unkeyed digest of the phone or the name.
  const dump = await rig.db.pool.query<{ t: string }>(
    `select concat_ws(' ',
        (select string_agg(s::text, ' ') from bitrix_sync.contact_snapshots s),
        (select string_agg(w::text, ' ') from bitrix_sync.workflow_instances w where w.user_id = $1),
        (select string_agg(c::text, ' ') from bitrix_sync.crm_commands c
           join bitrix_sync.workflow_instances w on w.id = c.workflow_id where w.user_id = $1)) as t`,
    [u.id],
  );
  const text = dump.rows[0]?.t ?? "";
  t.true(text.includes("v2:"), "keyed hashes are there");
  for (const plain of [u.phone, "Keyed Hash"]) t.false(text.includes(legacySha256(plain)));
  const { rows } = await rig.db.pool.query<{ content_hash: string }>(
    "select content_hash from bitrix_sync.workflow_instances where user_id = $1",
    [u.id],
  );
  for (const r of rows) t.regex(r.content_hash, /^v2:/);
});

test.serial(
  "a snapshot with the legacy hash: a phone change overwrites the same CRM entry, nothing is appended",
  async (t) => {
    const { u, contact } = await linked();
    const managerNumber = { id: 9_100_001, valueType: "WORK", value: "+74950000001" };
    contact.phones.push(managerNumber);
    const own = contact.phones[0];
    if (!own) throw new Error("the created Contact has no phone");
    await makeLegacy(u.id, contact.id, { phone: u.phone, name: null });

    const next = randomPhone();
    const since = new Date();
    await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [u.id, next]);
    const wf = await newestWorkflow(u.id, since);
    t.is(wf.outcome, "updated");
    t.deepEqual(
      contact.phones.map((p) => [p.id, p.value]),
      [
        [own.id, next],
        [managerNumber.id, managerNumber.value],
      ],
      "the entry bitrix-sync wrote is overwritten in place; no second App phone",
    );
    t.is((await snapshot(contact.id))?.phone_hash, piiHash(next), "the snapshot now holds the keyed form");
  },
);

test.serial("after the switch an unchanged user costs one read and no CRM write", async (t) => {
  const { u, contact } = await linked();
  await makeLegacy(u.id, contact.id, { phone: u.phone, name: null });
  const phonesBefore = JSON.stringify(contact.phones);
  const since = new Date();
  // An intent whose App-master content is what the CRM already holds: the phone changed and
  // changed back while the worker was stopped (the two intents coalesce; intake reads the current
  // phone).
  await rig.stopWorker();
  await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
    u.id,
    randomPhone(),
  ]);
  await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
    u.id,
    u.phone,
  ]);
  await rig.startWorker();
  const wf = await newestWorkflow(u.id, since);
  t.is(wf.state, "succeeded");
  t.is(wf.outcome, "no_change");
  const writes = await rig.db.pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.crm_commands where workflow_id = $1 and command_type in ('contact.update', 'contact.add')",
    [wf.id],
  );
  t.is(writes.rows[0]?.n, 0, "no CRM write");
  t.is(JSON.stringify(contact.phones), phonesBefore);
});

test.serial("reconciliation counts no recovery for a Contact whose values match a legacy hash", async (t) => {
  const settings = () => ({ ...rig.runtime.settings.get().reconcile, recoveredSpikeThreshold: 3 });
  await reconcileContacts(rig.runtime.services, settings(), { force: true });
  const { u, contact } = await linked({ fullName: "Legacy Name" });
  await makeLegacy(u.id, contact.id, { phone: u.phone, name: contact.name ?? null });
  // A CRM edit that changes nothing the App takes (a newer timestamp only).
  rig.emulator.store.touch(contact);
  const report = await reconcileContacts(rig.runtime.services, settings(), { force: true });
  t.is(report.status, "succeeded");
  t.is(report.recovered, 0, "the legacy hash of the same name is not a change");
  t.is((await snapshot(contact.id))?.name_hash, piiHash(contact.name ?? ""), "re-applied in the keyed form");
});
