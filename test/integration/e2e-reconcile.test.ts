// Incremental reconciliation (§10.2) against the emulator: a lost webhook is repaired, the watermark
// moves only after a whole successful run, a failed page is sent again within the run and one that
// keeps failing loses none of the other pages' Contacts, a failed run is retried after its backoff
// (not a whole interval later), a spike of recoveries (count or share) raises the ops alert, a
// Contact whose webhook is on its way is updated but not recovered, no echo.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { RUN_REQUEST_ATTEMPTS } from "../../src/crm/read-batches.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { setSettings } from "../helpers/settings.js";

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
    // The batch of pages 2 and 3 fails as a whole, every time it is sent within the run.
    rig.emulator.failNext("INTERNAL_SERVER_ERROR", {
      method: "crm.item.list",
      skip: 1,
      times: RUN_REQUEST_ATTEMPTS,
    });
    const failed = await reconcileContacts(rig.runtime.services, settings(), { force: true });
    t.is(failed.status, "failed");
    t.is(failed.failedRequests, 2);
    // Page 1, the other two pages sent RUN_REQUEST_ATTEMPTS times, then the read of page 1's Contacts.
    t.is(failed.requests, 1 + RUN_REQUEST_ATTEMPTS + 1);
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
  // In the database at once (not one process's counter): what the runbook reads and /metrics exports.
  const { rows } = await rig.db.pool.query(
    "select recovered, mapped, recorded_at from bitrix_sync.status_recovered_spikes limit 1",
  );
  t.like(rows[0], { recovered: 4, mapped: r.mapped });
  const { rows: m } = await rig.db.pool.query<{ value: number }>(
    `select value from bitrix_sync.metrics_snapshot(null, false)
      where family = 'bitrix_sync_reconciliation_recovered_spike_timestamp_seconds'`,
  );
  t.true(Math.abs((m[0]?.value ?? 0) - (rows[0].recorded_at as Date).getTime() / 1000) < 0.001);
});

test.serial("the interval is respected unless forced", async (t) => {
  const r = await reconcileContacts(rig.runtime.services, settings());
  t.false(r.ran, "the last run was moments ago");
});

/** Settings whose window holds only what a test changes after `fresh()`: no overlap. */
const windowed = () => ({ ...settings(), overlapSec: 0 });

/** A run now, then a second later: the window of the next run starts after both (one-second times). */
async function fresh() {
  await new Promise((r) => setTimeout(r, 1100));
  await reconcileContacts(rig.runtime.services, windowed(), { force: true });
  await new Promise((r) => setTimeout(r, 1100));
}

const FAULT = {
  kind: "command_error",
  error: "INTERNAL_SERVER_ERROR",
  description: "boom",
  status: 500,
} as const;

async function fullName(userId: string) {
  const { rows } = await rig.db.pool.query(
    "select full_name from han_app.client_profile where user_id = $1",
    [userId],
  );
  return rows[0]?.full_name as string;
}

/**
 * Two linked users whose Contacts land on the first and the second page of the window: A, 60 new
 * Contacts, B, 60 more (pages of 50, ordered by id).
 */
async function twoPages() {
  const [a] = await linkedUsers(1);
  for (let i = 0; i < 60; i++)
    rig.emulator.store.createContact({ name: `Page ${i}`, uf: { [F.registered]: 1 } });
  const [b] = await linkedUsers(1);
  for (let i = 0; i < 60; i++)
    rig.emulator.store.createContact({ name: `Page ${i}`, uf: { [F.registered]: 1 } });
  if (!a?.contact || !b?.contact) throw new Error("no contact");
  for (const u of [a, b]) {
    if (!u.contact) continue;
    u.contact.name = `Paged ${u.userId.slice(0, 4)}`;
    rig.emulator.store.touch(u.contact);
  }
  return { a, b };
}

test.serial("a page that fails once is sent again within the run, and the run succeeds", async (t) => {
  await fresh();
  const { a, b } = await twoPages();
  const start = await cursor();
  rig.emulator.failNext(FAULT, { method: "crm.item.list", params: { start: 50 } });
  const r = await reconcileContacts(rig.runtime.services, windowed(), { force: true });
  t.is(r.status, "succeeded", r.errorCode);
  t.is(r.failedRequests, 0);
  t.is(r.scanned, 122);
  t.true((await cursor()).watermark > start.watermark, "the watermark moved");
  t.is(await fullName(a.userId), a.contact?.name as string);
  t.is(await fullName(b.userId), b.contact?.name as string);
});

test.serial(
  "a page that keeps failing: the other pages' Contacts are applied, the run fails, the watermark stays; the next run reads the window again",
  async (t) => {
    await fresh();
    const { a, b } = await twoPages();
    const start = await cursor();
    const logged = rig.logs.length;
    rig.emulator.failNext(FAULT, { method: "crm.item.list", params: { start: 50 }, times: 100 });
    const r = await reconcileContacts(rig.runtime.services, windowed(), { force: true });
    rig.emulator.clearFaults();
    t.is(r.status, "failed");
    t.is(r.errorCode, "server_error");
    t.is(r.failedRequests, 1);
    t.is(r.scanned, 72, "pages 1 and 3");
    t.is(r.updated, 1, "A, on page 1, was applied");
    t.is(await fullName(a.userId), a.contact?.name as string);
    t.not(await fullName(b.userId), b.contact?.name as string, "B, on the failed page, is not known yet");
    const after = await cursor();
    t.deepEqual(after.watermark, start.watermark, "the watermark stays");
    t.is(after.last_run_status, "failed");
    t.is(after.last_error_code, "server_error");
    t.true(rig.logs.slice(logged).some((l) => l.includes('"event":"reconciliation.request_failed"')));
    t.truthy(r.retryAt, "the run is due again at its backoff");

    const next = await reconcileContacts(rig.runtime.services, windowed(), { force: true });
    t.is(next.status, "succeeded");
    t.is(next.scanned, 122);
    t.is(await fullName(b.userId), b.contact?.name as string);
    t.true((await cursor()).watermark > start.watermark);
  },
);

test.serial("a Contact whose webhook is waiting in the inbox is updated, not recovered", async (t) => {
  await fresh();
  const [u] = await linkedUsers(1);
  if (!u?.contact) throw new Error("no contact");
  await rig.stopWorker(); // nothing processes the inbox meanwhile
  try {
    u.contact.name = "Announced by a robot";
    rig.emulator.store.touch(u.contact);
    await rig.db.pool.query(
      "select * from bitrix_sync.accept_webhooks(array['contact'], array[3], array[$1], array['127.0.0.1'::inet])",
      [String(u.contact.id)],
    );
    const r = await reconcileContacts(rig.runtime.services, windowed(), { force: true });
    t.is(r.status, "succeeded");
    t.is(r.updated, 1);
    t.is(r.recovered, 0, "the robot's call arrived: nothing was lost");
    t.false(r.spike);
    t.is(await fullName(u.userId), "Announced by a robot");
  } finally {
    await rig.startWorker();
  }
});

test.serial(
  "a quiet portal that loses its only webhook raises the spike by share, below the count threshold",
  async (t) => {
    const quiet = () => ({ ...windowed(), recoveredSpikeThreshold: 20, recoveredSpikeRatio: 0.2 });
    await fresh();
    const [u] = await linkedUsers(1);
    if (!u?.contact) throw new Error("no contact");
    u.contact.name = "Lost webhook";
    rig.emulator.store.touch(u.contact);
    const before = await rig.db.pool.query(
      "select last_applied_source from bitrix_sync.contact_snapshots where contact_id = $1",
      [String(u.contact.id)],
    );
    t.not(before.rows[0]?.last_applied_source, "webhook");
    const logged = rig.logs.length;
    const r = await reconcileContacts(rig.runtime.services, quiet(), { force: true });
    t.is(r.status, "succeeded");
    t.is(r.mapped, 1);
    t.is(r.recovered, 1);
    t.true(r.spike, "1 of 1 changed Contacts recovered: a share of 100 %");
    t.true(rig.logs.slice(logged).some((l) => l.includes('"event":"reconciliation.recovered_spike"')));
  },
);

test.serial(
  "a failed run is retried after its backoff by the task, not after a whole interval",
  async (t) => {
    await setSettings(rig.db, { "reconcile.contacts_interval_sec": 3600 });
    await rig.runtime.settings.refresh();
    t.teardown(async () => {
      await setSettings(rig.db, { "reconcile.contacts_interval_sec": 900 });
      await rig.runtime.settings.refresh();
    });
    // The portal refuses everything: the forced run fails, and schedules itself again.
    rig.emulator.setOutage("INTERNAL_SERVER_ERROR");
    let failedAt: Date;
    try {
      await rig.db.pool.query(`select graphile_worker.add_job('reconcile_contacts', '{"force": true}')`);
      const failed = await waitFor(async () => {
        const c = await cursorRow();
        return c.last_run_status === "failed" && c.failed_runs >= 1 ? c : null;
      });
      failedAt = failed.last_run_started_at;
      t.truthy(failed.retry_at, "a retry time was recorded");
      t.true(failed.retry_at.getTime() - failedAt.getTime() < 60_000, "within the backoff, not the interval");
    } finally {
      rig.emulator.setOutage(null);
    }
    // Not forced, an hour's interval: only the backoff lets it run again.
    const ok = await waitFor(
      async () => {
        const c = await cursorRow();
        return c.last_run_status === "succeeded" ? c : null;
      },
      20_000,
      "the retried run",
    );
    t.is(ok.failed_runs, 0);
    t.true(ok.last_run_started_at > failedAt, "a new run started after the failed one");
    t.true(rig.logs.some((l) => l.includes('"event":"reconciliation.failed"')));
  },
);

async function cursorRow() {
  const { rows } = await rig.db.pool.query<{
    last_run_status: string;
    failed_runs: number;
    retry_at: Date;
    last_run_started_at: Date;
  }>(
    "select last_run_status, failed_runs, retry_at, last_run_started_at from bitrix_sync.reconciliation_cursors where job_type = 'contacts'",
  );
  return rows[0] as NonNullable<(typeof rows)[0]>;
}
