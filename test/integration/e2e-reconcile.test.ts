// Incremental reconciliation (§10.2) against the emulator: a lost webhook is repaired, the watermark
// moves only after a whole successful run, a spike of recoveries raises the ops alert, no echo.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import { finishedWorkflow, type Rig, startRig } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
const F = SANDBOX_FIELDS;
test.before(async () => {
  rig = await startRig();
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

const settings = () => ({ ...rig.runtime.settings.get().reconcile, recoveredSpikeThreshold: 3 });

async function linkedUsers(n: number) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const u = await makeUser(rig.db.pool, { phone: randomPhone() });
    out.push(u);
  }
  for (const u of out) await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ entity_id: string; external_id: string }>(
    "select entity_id, external_id from bitrix_sync.entity_external_mapping where status = 'active' and entity_id = any($1)",
    [out.map((u) => u.id)],
  );
  return rows.map((r) => ({
    userId: r.entity_id,
    contact: rig.emulator.store.contacts.get(Number(r.external_id)),
  }));
}

async function cursor() {
  const { rows } = await rig.db.pool.query(
    "select watermark, last_run_status, last_error_code, last_recovered from bitrix_sync.reconciliation_cursors where job_type = 'contacts'",
  );
  return rows[0];
}

test.serial("a lost webhook is repaired by reconciliation, counted as recovered, without echo", async (t) => {
  await reconcileContacts(rig.runtime.services, settings(), { force: true }); // establish the watermark
  const [a] = await linkedUsers(1);
  if (!a?.contact) throw new Error("no contact");
  a.contact.name = "Changed in CRM";
  rig.emulator.store.touch(a.contact);
  const queueBefore = (await rig.db.pool.query("select count(*)::int as n from han_app.sync_queue")).rows[0]
    .n;
  const report = await reconcileContacts(rig.runtime.services, settings(), { force: true });
  t.is(report.status, "succeeded");
  t.true(report.scanned >= 1);
  t.is(report.recovered, 1);
  const p = await rig.db.pool.query("select full_name from han_app.client_profile where user_id = $1", [
    a.userId,
  ]);
  t.is(p.rows[0].full_name, "Changed in CRM");
  const s = await rig.db.pool.query(
    "select last_applied_source from bitrix_sync.contact_snapshots where contact_id = $1",
    [String(a.contact.id)],
  );
  t.is(s.rows[0].last_applied_source, "reconciliation");
  const queueAfter = (await rig.db.pool.query("select count(*)::int as n from han_app.sync_queue")).rows[0].n;
  t.is(queueAfter, queueBefore, "no App->CRM intent from applying CRM-master fields");
  // A second run finds nothing new to apply.
  const again = await reconcileContacts(rig.runtime.services, settings(), { force: true });
  t.is(again.recovered, 0);
  t.is(again.updated, 0);
});

test.serial(
  "only open Contacts with the registration flag set are listed (opened=Y, ufCrm_<n>=1)",
  async (t) => {
    const s = { ...settings(), overlapSec: 0 };
    // One-second timestamps: keep the previous tests' changes out of the window.
    await new Promise((r) => setTimeout(r, 1100));
    await reconcileContacts(rig.runtime.services, s, { force: true });
    await new Promise((r) => setTimeout(r, 1100)); // the portal's timestamps have one-second resolution
    rig.emulator.store.createContact({ name: "Not registered", uf: { [F.registered]: 0 } });
    rig.emulator.store.createContact({ name: "Closed", opened: false, uf: { [F.registered]: 1 } });
    rig.emulator.store.createContact({ name: "Registered", uf: { [F.registered]: 1 } });
    const r = await reconcileContacts(rig.runtime.services, s, { force: true });
    t.is(r.status, "succeeded");
    t.is(r.scanned, 1);
    t.is(r.requests, 1, "one page, nothing mapped to read");
  },
);

test.serial(
  "a failed page leaves the watermark where it was; the next run reads the window again",
  async (t) => {
    const users = await linkedUsers(3);
    await reconcileContacts(rig.runtime.services, settings(), { force: true });
    const start = await cursor();
    // Enough changed Contacts for several pages, then the second list request fails.
    for (let i = 0; i < 120; i++)
      rig.emulator.store.createContact({ name: `Bulk ${i}`, uf: { [F.registered]: 1 } });
    for (const u of users) {
      if (!u.contact) continue;
      u.contact.name = "After the failure";
      rig.emulator.store.touch(u.contact);
    }
    rig.emulator.failNext("INTERNAL_SERVER_ERROR", { method: "crm.item.list", skip: 1 });
    const failed = await reconcileContacts(rig.runtime.services, settings(), { force: true });
    t.is(failed.status, "failed");
    const after = await cursor();
    t.deepEqual(after.watermark, start.watermark, "watermark unchanged");
    t.is(after.last_run_status, "failed");
    const ok = await reconcileContacts(rig.runtime.services, settings(), { force: true });
    t.is(ok.status, "succeeded");
    t.true(ok.scanned >= 120);
    t.true((await cursor()).watermark > start.watermark);
    for (const u of users) {
      const p = await rig.db.pool.query("select full_name from han_app.client_profile where user_id = $1", [
        u.userId,
      ]);
      t.is(p.rows[0].full_name, "After the failure");
    }
  },
);

test.serial("many Contacts recovered without a webhook raise the ops alert", async (t) => {
  const users = await linkedUsers(4);
  await reconcileContacts(rig.runtime.services, settings(), { force: true });
  for (const u of users) {
    if (!u.contact) continue;
    u.contact.name = "Spike";
    rig.emulator.store.touch(u.contact);
  }
  const logged = rig.logs.length;
  const r = await reconcileContacts(rig.runtime.services, settings(), { force: true });
  t.is(r.recovered, 4);
  t.true(r.spike);
  t.true(rig.logs.slice(logged).some((l) => l.includes('"event":"reconciliation.recovered_spike"')));
});

test.serial("the interval is respected unless forced", async (t) => {
  const r = await reconcileContacts(rig.runtime.services, settings());
  t.false(r.ran, "the last run was moments ago");
});
