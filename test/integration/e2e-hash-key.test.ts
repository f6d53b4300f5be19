// Keyed hashes over personal data (src/hash.ts) end to end: what the service stores is an HMAC under
// BITRIX_SYNC_HASH_KEY labelled with its field (v3), never the plain SHA-256 of a phone, name or
// e-mail; and rows of the older forms (plain SHA-256 from before the key, v2 from before the labels)
// keep working, so a change of form rewrites no Contact: a phone change overwrites the same CRM entry,
// an unchanged user costs no CRM write, and reconciliation counts no false recovery. The unkeyed ones
// are cleared where the next read recomputes them (clear_unkeyed_hashes, migration 000029) and the
// snapshots' phone hashes re-keyed by the rekey_hashes task.
import { randomBytes, randomUUID } from "node:crypto";
import test from "ava";
import { makeWorkerUtils } from "graphile-worker";
import { CLEARED_HASH, legacySha256, legacyV2Hash, piiHash } from "../../src/hash.js";
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

type LegacyForm = "unkeyed" | "v2";
const FORMS: LegacyForm[] = ["unkeyed", "v2"];
const legacy = (form: LegacyForm, value: string) =>
  form === "unkeyed" ? legacySha256(value) : legacyV2Hash(value);

/**
 * Turns the user's stored hashes into what an older service wrote: plain SHA-256 before the key
 * existed, or v2 (keyed, not labelled) before the labels.
 */
async function makeLegacy(
  userId: string,
  contactId: number,
  values: { phone: string; name: string | null },
  form: LegacyForm,
) {
  await rig.db.pool.query(
    `update bitrix_sync.contact_snapshots
        set phone_hash = $2, name_hash = $3, email_hash = null
      where contact_id = $1`,
    [String(contactId), legacy(form, values.phone), values.name === null ? null : legacy(form, values.name)],
  );
  // What the old code stored as content hash.
  await rig.db.pool.query("update bitrix_sync.workflow_instances set content_hash = $2 where user_id = $1", [
    userId,
    legacy(form, `legacy-content-${userId}`),
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

test.serial(
  "stored hashes are keyed and labelled: never the plain SHA-256 of a phone, name or e-mail",
  async (t) => {
    const { u, contact } = await linked({ fullName: "Keyed Hash" });
    const snap = await snapshot(contact.id);
    t.is(snap?.phone_hash, piiHash("phone", u.phone));
    t.regex(snap?.phone_hash ?? "", /^v3:[A-Za-z0-9_-]{43}$/);
    t.is(snap?.name_hash, piiHash("name", "Keyed Hash"));
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
    t.true(text.includes("v3:"), "keyed hashes are there");
    for (const plain of [u.phone, "Keyed Hash"]) {
      t.false(text.includes(legacySha256(plain)));
      t.false(text.includes(legacyV2Hash(plain)), "nor the unlabelled form");
    }
    const { rows } = await rig.db.pool.query<{ content_hash: string }>(
      "select content_hash from bitrix_sync.workflow_instances where user_id = $1",
      [u.id],
    );
    for (const r of rows) t.regex(r.content_hash, /^v3:/);
  },
);

for (const form of FORMS)
  test.serial(
    `a snapshot with the ${form} hash: a phone change overwrites the same CRM entry, nothing is appended`,
    async (t) => {
      const { u, contact } = await linked();
      const managerNumber = { id: 9_100_001, valueType: "WORK", value: "+74950000001" };
      contact.phones.push(managerNumber);
      const own = contact.phones[0];
      if (!own) throw new Error("the created Contact has no phone");
      await makeLegacy(u.id, contact.id, { phone: u.phone, name: null }, form);

      const next = randomPhone();
      const since = new Date();
      await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
        u.id,
        next,
      ]);
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
      t.is(
        (await snapshot(contact.id))?.phone_hash,
        piiHash("phone", next),
        "the snapshot now holds the keyed form",
      );
    },
  );

for (const form of FORMS)
  test.serial(
    `after a ${form} content and phone hash an unchanged user costs one read and no CRM write`,
    async (t) => {
      const { u, contact } = await linked();
      await makeLegacy(u.id, contact.id, { phone: u.phone, name: null }, form);
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
    },
  );

for (const form of FORMS)
  test.serial(
    `reconciliation counts no recovery for a Contact whose values match a ${form} hash`,
    async (t) => {
      const settings = () => ({ ...rig.runtime.settings.get().reconcile, recoveredSpikeThreshold: 3 });
      await reconcileContacts(rig.runtime.services, settings(), { force: true });
      const { u, contact } = await linked({ fullName: "Legacy Name" });
      await makeLegacy(u.id, contact.id, { phone: u.phone, name: contact.name ?? null }, form);
      // A CRM edit that changes nothing the App takes (a newer timestamp only).
      rig.emulator.store.touch(contact);
      const report = await reconcileContacts(rig.runtime.services, settings(), { force: true });
      t.is(report.status, "succeeded");
      t.is(report.recovered, 0, "the legacy hash of the same name is not a change");
      t.is(
        (await snapshot(contact.id))?.name_hash,
        piiHash("name", contact.name ?? ""),
        "re-applied in the keyed form",
      );
    },
  );

test.serial(
  "clear_unkeyed_hashes clears what the next read recomputes; reconciliation then counts no recovery",
  async (t) => {
    const settings = () => ({ ...rig.runtime.settings.get().reconcile, recoveredSpikeThreshold: 1 });
    await reconcileContacts(rig.runtime.services, settings(), { force: true });
    const { u, contact } = await linked({ fullName: "Cleared Name" });
    await makeLegacy(u.id, contact.id, { phone: u.phone, name: "Cleared Name" }, "unkeyed");
    const email = legacySha256("cleared@example.org");
    await rig.db.pool.query(
      "update bitrix_sync.contact_snapshots set email_hash = $2 where contact_id = $1",
      [String(contact.id), email],
    );
    // A finished command's result in the old form, as the read of purpose phones stored it.
    const { rows: cmds } = await rig.db.pool.query<{ id: string }>(
      `select c.id from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
        where w.user_id = $1 and c.status = 'succeeded' order by c.id limit 1`,
      [u.id],
    );
    const cmdId = cmds[0]?.id;
    await rig.db.pool.query(
      `update bitrix_sync.crm_commands set response = jsonb_build_object('contacts', jsonb_build_array(
          jsonb_build_object('id', 1, 'phones', jsonb_build_array(jsonb_build_object('id', 7, 'hash', $2::text)))))
        where id = $1`,
      [cmdId, legacySha256(u.phone)],
    );

    const { rows } = await rig.db.pool.query<{ column_name: string; cleared: string }>(
      "select * from bitrix_sync.clear_unkeyed_hashes()",
    );
    const cleared = Object.fromEntries(rows.map((r) => [r.column_name, Number(r.cleared)]));
    t.true((cleared["workflow_instances.content_hash"] ?? 0) >= 1);
    t.true((cleared["contact_snapshots.name_hash"] ?? 0) >= 1);
    t.true((cleared["crm_commands.response"] ?? 0) >= 1);
    const snap = await snapshot(contact.id);
    t.deepEqual([snap?.name_hash, snap?.email_hash], [CLEARED_HASH, CLEARED_HASH]);
    t.is(snap?.phone_hash, legacySha256(u.phone), "the phone is the service's to re-key, not cleared");
    const { rows: w } = await rig.db.pool.query(
      "select count(*)::int as n from bitrix_sync.workflow_instances where user_id = $1 and content_hash is not null",
      [u.id],
    );
    t.is(w[0]?.n, 0);
    const { rows: r } = await rig.db.pool.query<{ response: unknown }>(
      "select response from bitrix_sync.crm_commands where id = $1",
      [cmdId],
    );
    t.false(JSON.stringify(r[0]?.response).includes(legacySha256(u.phone)));
    t.deepEqual(
      await rig.db.pool
        .query("select * from bitrix_sync.clear_unkeyed_hashes() where cleared > 0")
        .then((q) => q.rows),
      [],
      "re-runnable: nothing left",
    );

    // The next apply recomputes them; reconciliation does not count the unknown before as a change.
    rig.emulator.store.touch(contact);
    const report = await reconcileContacts(rig.runtime.services, settings(), { force: true });
    t.is(report.status, "succeeded");
    t.is(report.recovered, 0);
    t.false(report.spike);
    t.is((await snapshot(contact.id))?.name_hash, piiHash("name", "Cleared Name"));
  },
);

test.serial(
  "the rekey_hashes task re-keys legacy phone hashes against the App's phone and clears the rest",
  async (t) => {
    const a = await linked();
    const b = await linked();
    const c = await linked();
    const d = await linked();
    // a: unkeyed of the App's phone; b: v2 of the App's phone; c: unkeyed of another number (the App's
    // phone changed and that change never reached the Contact); d: v2 of another number.
    const other = randomPhone();
    const set = (contactId: number, hash: string) =>
      rig.db.pool.query("update bitrix_sync.contact_snapshots set phone_hash = $2 where contact_id = $1", [
        String(contactId),
        hash,
      ]);
    await set(a.contact.id, legacySha256(a.u.phone));
    await set(b.contact.id, legacyV2Hash(b.u.phone));
    await set(c.contact.id, legacySha256(other));
    await set(d.contact.id, legacyV2Hash(other));

    const utils = await makeWorkerUtils({ pgPool: rig.db.pool });
    try {
      await utils.addJob("rekey_hashes", {}, { jobKey: `rekey-${randomUUID()}`, maxAttempts: 1 });
    } finally {
      await utils.release();
    }
    await waitFor(
      async () => (await snapshot(a.contact.id))?.phone_hash?.startsWith("v3:"),
      20_000,
      "the rekey task",
    );
    t.is((await snapshot(a.contact.id))?.phone_hash, piiHash("phone", a.u.phone));
    t.is((await snapshot(b.contact.id))?.phone_hash, piiHash("phone", b.u.phone));
    t.is((await snapshot(c.contact.id))?.phone_hash, null, "unkeyed and matching no phone at hand: cleared");
    t.is((await snapshot(d.contact.id))?.phone_hash, legacyV2Hash(other), "keyed: left for the next read");
    const { rows } = await rig.db.pool.query<{ n: number }>(
      "select count(*)::int as n from bitrix_sync.contact_snapshots where phone_hash ~ '^[0-9a-f]{64}$'",
    );
    t.is(rows[0]?.n, 0, "no unkeyed phone hash is left");
    t.true(rig.logs.some((l) => l.includes('"event":"rekey.run"')));
  },
);

test.serial(
  "rekey_contact_phones refuses a hash of the wrong form and skips a user with a running workflow",
  async (t) => {
    const { u, contact } = await linked();
    const unkeyed = legacySha256(u.phone);
    await rig.db.pool.query(
      "update bitrix_sync.contact_snapshots set phone_hash = $2 where contact_id = $1",
      [String(contact.id), unkeyed],
    );
    for (const [old, next] of [
      [unkeyed, "+79990000000"],
      [piiHash("phone", u.phone), piiHash("phone", u.phone)],
      [legacyV2Hash(u.phone), null],
    ]) {
      const err = await t.throwsAsync(
        rig.db.pool.query("select bitrix_sync.rekey_contact_phones($1, $2, $3)", [
          [String(contact.id)],
          [old],
          [next],
        ]),
      );
      t.is((err as { code?: string } | undefined)?.code, "BS004");
    }
    // A running workflow of the user: its own read of the Contact re-keys it.
    await rig.stopWorker();
    try {
      await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
        u.id,
        randomPhone(),
      ]);
      await rig.db.pool.query("select bitrix_sync.fold_intent_journal()");
      await rig.db.pool.query(`select bitrix_sync.start_or_join_workflow($1, 'contact.update', null, $2)`, [
        u.id,
        `v3:${randomBytes(32).toString("base64url").slice(0, 43)}`,
      ]);
      const { rows } = await rig.db.pool.query<{ n: number }>(
        "select bitrix_sync.rekey_contact_phones($1, $2, $3) as n",
        [[String(contact.id)], [unkeyed], [piiHash("phone", u.phone)]],
      );
      t.is(rows[0]?.n, 0);
    } finally {
      await rig.startWorker();
    }
  },
);
