// The convergence audit's runs beyond the full audit (e2e-audit.test.ts): the spare-budget limiter
// that gives it only what sync traffic does not need, the sample of the least recently compared
// links that covers every link within the period, the paged scan of registered Contacts, a
// registration without a user id left to a person, users with work in progress left alone, and the
// automatic repair a setting switches on per kind. Real PostgreSQL, the emulator over HTTP.
import { randomUUID } from "node:crypto";
import test from "ava";
import pg from "pg";
import { runConvergenceAudit } from "../../src/audit/run.js";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser } from "../helpers/factories.js";
import { asRole } from "../helpers/roles.js";
import { setSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

const F = SANDBOX_FIELDS;

// --- the spare-budget limiter, in SQL -------------------------------------------------------------

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/**
 * acquire_spare_crm_request under the settings limiter.refill_per_sec `refill` (10), burst 10, 2 in
 * flight, audit.budget_share `share`: the function reads them itself (the caller passes none).
 */
let active = "";
async function spare(bucket: string, share = 0.1, refill = 10) {
  const want = JSON.stringify([share, refill]);
  if (active !== want) {
    await setSettings(db, {
      "limiter.refill_per_sec": refill,
      "limiter.burst": 10,
      "limiter.max_in_flight": 2,
      "audit.budget_share": share,
    });
    active = want;
  }
  const { rows } = await db.pool.query<{ granted: boolean; slot_id: string | null; wait_ms: number }>(
    "select * from bitrix_sync.acquire_spare_crm_request($1, 'test')",
    [bucket],
  );
  return rows[0] as { granted: boolean; slot_id: string | null; wait_ms: number };
}
async function syncAcquire(bucket: string, refill = 10) {
  const { rows } = await db.pool.query<{ granted: boolean; slot_id: string | null; tokens: number }>(
    "select granted, slot_id, tokens from bitrix_sync.acquire_crm_request($1, 'sync', $2, 10, 2, 60000, 0.05)",
    [bucket, refill],
  );
  return rows[0] as { granted: boolean; slot_id: string | null; tokens: number };
}
async function tokens(bucket: string): Promise<number> {
  const { rows } = await db.pool.query("select tokens from bitrix_sync.crm_rate_buckets where bucket = $1", [
    bucket,
  ]);
  return Number(rows[0]?.tokens);
}

test.serial(
  "the spare limiter grants from a full bucket, one request at a time, and its slot is not sync's",
  async (t) => {
    const b = "spare-1.portal.test";
    const first = await spare(b);
    t.true(first.granted);
    t.is(await tokens(b), 9, "one token of the shared bucket");
    t.false((await spare(b)).granted, "one spare request in flight at a time");
    // The sync path still has both its in-flight slots.
    const s1 = await syncAcquire(b);
    const s2 = await syncAcquire(b);
    t.true(s1.granted && s2.granted);
    t.false((await syncAcquire(b)).granted, "its own cap, not lowered by the spare slot");
    for (const s of [first.slot_id, s1.slot_id, s2.slot_id])
      await db.pool.query("select bitrix_sync.release_crm_request($1)", [s]);
  },
);

test.serial(
  "the spare limiter takes only from a full bucket: never a token sync traffic is using",
  async (t) => {
    const b = "spare-2.portal.test";
    // Sync traffic takes one token (burst 10, a slow refill): the bucket is no longer full.
    const g = await syncAcquire(b, 0.1);
    await db.pool.query("select bitrix_sync.release_crm_request($1)", [g.slot_id]);
    const refused = await spare(b, 0.1, 0.1);
    t.false(refused.granted);
    t.true(refused.wait_ms > 0, "it says when to ask again");
    t.true((await tokens(b)) <= 9.01, "nothing taken");
    // Full again (a fast refill now): granted.
    await new Promise((r) => setTimeout(r, 300));
    t.true((await spare(b, 0.1, 10)).granted);
  },
);

test.serial("the spare limiter waits out a cut rate and a refusal's cool-down", async (t) => {
  const b = "spare-3.portal.test";
  await syncAcquire(b).then((g) => db.pool.query("select bitrix_sync.release_crm_request($1)", [g.slot_id]));
  await db.pool.query("select bitrix_sync.note_rate_limited($1, 0.5, 0.1, 1000, 0.05)", [b]);
  const cut = await spare(b);
  t.false(cut.granted);
  t.true(cut.wait_ms >= 100);
});

test.serial("the spare limiter stays within its share of the rate", async (t) => {
  const b = "spare-4.portal.test";
  // Share 0.1 of 10/s: one request a second at most, however often it asks.
  const started = Date.now();
  let granted = 0;
  while (Date.now() - started < 2500) {
    const g = await spare(b, 0.1);
    if (g.granted) {
      granted++;
      await db.pool.query("select bitrix_sync.release_spare_crm_request($1)", [g.slot_id]);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  t.true(granted >= 2 && granted <= 4, `${granted} granted in 2.5 s (the first at once, then one a second)`);
});

test.serial(
  "the previous release's form ignores the caller's numbers: no rate cut undone, no slot held longer than 2 minutes",
  async (t) => {
    const b = "spare-5.portal.test";
    await syncAcquire(b).then((g) =>
      db.pool.query("select bitrix_sync.release_crm_request($1)", [g.slot_id]),
    );
    await db.pool.query("select bitrix_sync.note_rate_limited($1, 0.5, 0.1, 0, 0.05)", [b]);
    const before = await db.pool.query(
      "select rate_factor, rate_changed_at from bitrix_sync.crm_rate_buckets where bucket = $1",
      [b],
    );
    // As the admin (npm run diagnose of the previous release), with a recovery of a billion a second,
    // a huge rate and a slot of 24 days.
    const asAdmin = (sql: string, bucket: string) =>
      asRole(db.pool, "bitrix_sync_admin", (c) =>
        c.query<{ granted: boolean; slot_id: string | null }>(sql, [bucket]),
      );
    const cut = await asAdmin(
      "select * from bitrix_sync.acquire_spare_crm_request($1, 'diagnose:x', 1e6, 250, 50, 1, 2073600000, 1e9)",
      b,
    );
    t.false(cut.rows[0]?.granted, "the cut rate has not climbed back: nothing is spare");
    const after = await db.pool.query(
      "select rate_factor, rate_changed_at from bitrix_sync.crm_rate_buckets where bucket = $1",
      [b],
    );
    t.deepEqual(after.rows, before.rows, "the rate factor is the sync path's to write");

    const b2 = "spare-6.portal.test";
    const g = await asAdmin(
      "select * from bitrix_sync.acquire_spare_crm_request($1, 'diagnose:x', 1e6, 250, 50, 1, 2073600000, 1e9)",
      b2,
    );
    t.true(g.rows[0]?.granted, JSON.stringify(g.rows));
    const slot = await db.pool.query<{ ttl: number }>(
      "select extract(epoch from expires_at - acquired_at)::float8 as ttl from bitrix_sync.crm_inflight_slots where slot_id = $1",
      [g.rows[0]?.slot_id],
    );
    t.is(slot.rows[0]?.ttl, 120, "the server's lifetime, not 24 days");
    // Audited: who, when.
    const use = await db.pool.query(
      "select db_user, holder, grants, first_at <= last_at as ordered from bitrix_sync.spare_budget_use where bucket = $1",
      [b2],
    );
    t.deepEqual(use.rows, [{ db_user: "postgres", holder: "diagnose:x", grants: "1", ordered: true }]);
    await db.pool.query("select bitrix_sync.release_spare_crm_request($1)", [g.rows[0]?.slot_id]);
    // The form without numbers counts into the same row.
    await new Promise((r) => setTimeout(r, 1100));
    const again = await asAdmin("select * from bitrix_sync.acquire_spare_crm_request($1, 'diagnose:x')", b2);
    t.true(again.rows[0]?.granted, JSON.stringify(again.rows));
    const used = await db.pool.query("select grants from bitrix_sync.spare_budget_use where bucket = $1", [
      b2,
    ]);
    t.deepEqual(used.rows, [{ grants: "2" }]);
    // The admin reads the use; it cannot write it.
    const seen = await asRole(db.pool, "bitrix_sync_admin", (c) =>
      c.query("select count(*)::int as n from bitrix_sync.spare_budget_use where bucket = $1", [b2]),
    );
    t.is(seen.rows[0]?.n, 1);
    await t.throwsAsync(
      asRole(db.pool, "bitrix_sync_admin", (c) => c.query("delete from bitrix_sync.spare_budget_use")),
      { code: "42501" },
    );
  },
);

test.serial(
  "a repair wakes a sync loop asleep on the intake watch at once, not at its next poll",
  async (t) => {
    const user = await makeUser(db.pool, { phone: "+79990001122" });
    await db.pool.query("delete from han_app.sync_queue where entity_id = $1", [user.id]);
    await db.pool.query(
      "insert into bitrix_sync.drift_findings (kind, user_id, details) values ('unmapped_user', $1, '{}')",
      [user.id],
    );
    // A sync loop asleep: its own connection holds the intake watch (sql/intake/watch.sql) and listens.
    const sleeper = new pg.Client({ connectionString: db.url });
    const listener = new pg.Client({ connectionString: db.url });
    await sleeper.connect();
    await listener.connect();
    t.teardown(async () => {
      await sleeper.end();
      await listener.end();
    });
    await listener.query("listen bitrix_sync_queue");
    const heard: string[] = [];
    listener.on("notification", (n) => heard.push(n.payload ?? ""));
    await sleeper.query("begin");
    t.deepEqual((await sleeper.query("select bitrix_sync.watch_intake() as w")).rows, [{ w: true }]);
    await asRole(db.pool, "bitrix_sync_admin", (c) =>
      c.query("select * from bitrix_sync.repair_drift('ops:test', 'wake-up test', $1::uuid[])", [[user.id]]),
    );
    await waitFor(async () => heard.includes("drift_repair"), 5_000, "the repair's NOTIFY");
    await sleeper.query("commit");
    // With no loop asleep it stays quiet: the next loop to fall asleep looks at the queue first.
    heard.length = 0;
    await db.pool.query(
      "insert into bitrix_sync.drift_findings (kind, user_id, details) values ('phone_missing', $1, '{}')",
      [user.id],
    );
    await asRole(db.pool, "bitrix_sync_admin", (c) =>
      c.query("select * from bitrix_sync.repair_drift('ops:test', 'wake-up test', $1::uuid[])", [[user.id]]),
    );
    await new Promise((r) => setTimeout(r, 300));
    t.deepEqual(heard, []);
  },
);

// --- runs against the emulator ----------------------------------------------------------------------

async function withRig(settings: Record<string, unknown>, fn: (rig: Rig) => Promise<void>): Promise<void> {
  const rig = await startRig({ settings: { "audit.enabled": false, "audit.grace_sec": 0, ...settings } });
  try {
    await rig.startWorker();
    await fn(rig);
  } finally {
    await rig.close();
  }
}

async function linkUsers(rig: Rig, n: number): Promise<Array<{ id: string; contactId: number }>> {
  const users = [];
  for (let i = 0; i < n; i++) users.push(await makeUser(rig.db.pool));
  const out = [];
  for (const u of users) {
    await finishedWorkflow(rig, u.id);
    const { rows } = await rig.db.pool.query(
      "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
      [u.id],
    );
    out.push({ id: u.id, contactId: Number(rows[0].external_id) });
  }
  return out;
}

async function statusDrift(rig: Rig) {
  return await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const { rows } = await c.query(
      "select user_id, contact_id, kind, repair from bitrix_sync.status_drift order by kind, contact_id",
    );
    return rows;
  });
}

test.serial(
  "every active link has an audit mark from its opening, and loses it when it closes or breaks",
  async (t) => {
    const mark = async (mappingId: string) =>
      (
        await db.pool.query<{ audited_at: Date; opened_at: Date }>(
          `select k.audited_at, m.opened_at from bitrix_sync.audit_marks k
             join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id where k.mapping_id = $1`,
          [mappingId],
        )
      ).rows[0];
    const links: string[] = [];
    for (const [i, contact] of ["610001", "610002"].entries()) {
      const user = await makeUser(db.pool);
      const { rows } = await db.pool.query<{ id: string }>(
        "select id from bitrix_sync.open_mapping($1, $2, null)",
        [user.id, contact],
      );
      const id = rows[0]?.id as string;
      links.push(id);
      const m = await mark(id);
      t.truthy(m, `link ${i}: a mark as it opens`);
      t.deepEqual(m?.audited_at, m?.opened_at, "never compared: the mark holds when it opened");
    }
    await db.pool.query("select bitrix_sync.close_mapping($1, 'user_deactivated', null)", [links[0]]);
    await db.pool.query("select bitrix_sync.close_mapping($1, 'contact_not_found', null, true)", [links[1]]);
    for (const id of links) t.is(await mark(id), undefined, "a closed or broken link has no mark");
    // Nobody but the functions and the trigger writes the marks.
    await t.throwsAsync(
      asRole(db.pool, "bitrix_sync_user", (c) => c.query("delete from bitrix_sync.audit_marks")),
      { message: /permission denied/ },
    );
  },
);

test.serial(
  "sampled runs compare the least recently compared links first: every link within the period",
  async (t) => {
    // Period 1 day, a run every 4 hours: each run takes a sixth of the links.
    await withRig({ "audit.period_days": 1, "audit.interval_sec": 14400 }, async (rig) => {
      const links = await linkUsers(rig, 6);
      // Nothing else touches the links while the runs judge them: the crontab's reconciliation,
      // on the minute, rewrites the snapshots of Contacts it reads, and a link whose snapshot was
      // written after the audit's read is left for a later run (a CI run's second run judged none).
      await rig.stopWorker();
      const seen: string[][] = [];
      for (let run = 0; run < 6; run++) {
        const r = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), {
          force: true,
        });
        t.is(r.status, "succeeded");
        t.is(r.audited, 1, `run ${run}: its share of the links`);
        const { rows } = await rig.db.pool.query(
          "select user_id from bitrix_sync.audit_marks order by audited_at desc limit 1",
        );
        seen.push(rows.map((x) => x.user_id));
      }
      t.deepEqual(new Set(seen.flat()).size, 6, "six runs, six different links: each compared once");
      t.deepEqual([...new Set(seen.flat())].sort(), links.map((l) => l.id).sort());
      const { rows } = await asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
        c.query("select last_links, last_overdue from bitrix_sync.status_audit"),
      );
      t.deepEqual(rows[0], { last_links: 6, last_overdue: 0 });
      // A run that is not due does nothing (not forced, the interval has not passed).
      await setSettings(rig.db, {
        "audit.enabled": true,
        "audit.period_days": 1,
        "audit.interval_sec": 14400,
        "audit.grace_sec": 0,
      });
      await rig.runtime.settings.refresh?.();
      const idle = await runConvergenceAudit(rig.runtime.services, { ...rig.runtime.settings.get() });
      t.false(idle.ran);
    });
  },
);

test.serial(
  "the registered scan pages through the flagged Contacts; one without a user id is left to a person",
  async (t) => {
    await withRig({ "audit.period_days": 1, "audit.interval_sec": 86400 }, async (rig) => {
      // The runs below are called directly, and the request count is the audit's own: the worker's
      // crontab (the reconciliation on the minute) would add its reads to the emulator's log (a CI
      // run counted more than 3).
      await rig.stopWorker();
      // 120 Contacts registered for users the App does not know, and one without any user id.
      const strangers = Array.from({ length: 120 }, () =>
        rig.emulator.store.createContact({ name: "X", uf: { [F.userId]: randomUUID(), [F.registered]: 1 } }),
      );
      const nobody = rig.emulator.store.createContact({ name: "Y", uf: { [F.registered]: 1 } });
      rig.emulator.store.createContact({
        name: "Not registered",
        uf: { [F.userId]: randomUUID(), [F.registered]: 0 },
      });
      // A sampled run reads its share of the pages (at least one): the first 50 of them.
      const first = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), {
        force: true,
      });
      t.is(first.registeredListed, 50);
      t.is((await statusDrift(rig)).length, 50);
      // A full run reads to the end, in one request (three pages in one batch).
      const requestsBefore = rig.emulator.log.length;
      const all = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { all: true });
      t.is(all.registeredListed, 121 + 50, "every flagged Contact, and the open findings read again by ID");
      t.true(rig.emulator.log.length - requestsBefore <= 3);
      const found = await statusDrift(rig);
      t.is(found.filter((f) => f.kind === "registered_unknown_user").length, 121);
      const manual = found.find((f) => f.contact_id === String(nobody.id));
      t.like(manual, { user_id: null, kind: "registered_unknown_user", repair: "manual" });
      // The repair records a deactivation per user id, and lists the one without as manual.
      const plan = await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
        const { rows } = await c.query(
          "select user_id, contact_id, intent, recorded from bitrix_sync.repair_drift('ops:test', 'CRM import of 1 Dec', null, true)",
        );
        return rows;
      });
      t.is(plan.length, 121);
      t.deepEqual(
        plan.filter((p) => p.intent === "manual"),
        [{ user_id: null, contact_id: String(nobody.id), intent: "manual", recorded: false }],
      );
      // A manager clears the flag: the next run's read by ID finds it in step.
      nobody.uf[F.registered] = 0;
      for (const s of strangers.slice(0, 10)) s.uf[F.registered] = 0;
      await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { force: true });
      const after = await statusDrift(rig);
      t.is(after.length, 110);
      t.false(after.some((f) => f.contact_id === String(nobody.id)));
    });
  },
);

test.serial("a user with work in progress is left for a later run, whatever the Contact says", async (t) => {
  await withRig({}, async (rig) => {
    const [u] = await linkUsers(rig, 1);
    if (!u) throw new Error("no user");
    const contact = rig.emulator.store.contacts.get(u.contactId);
    if (!contact) throw new Error("no Contact");
    contact.uf[F.registered] = 0;
    // The App changes the phone in the same moment: an intent is recorded, the update is on its way.
    await rig.stopWorker();
    await rig.db.pool.query("update han_app.user_identity set phone_number = '+79990000099' where id = $1", [
      u.id,
    ]);
    const r = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { all: true });
    t.is(r.status, "succeeded");
    t.is(r.audited, 0, "not judged");
    t.deepEqual(await statusDrift(rig), []);
    await rig.startWorker();
    const wf = await finishedWorkflow(rig, u.id);
    t.is(wf.outcome, "updated");
    t.is(contact.uf[F.registered], 1, "the update set the flag on the way");
    const again = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { all: true });
    t.is(again.audited, 1);
    t.deepEqual(await statusDrift(rig), []);
  });
});

test.serial(
  "audit.auto_repair_kinds repairs the kinds switched on after each run, once, audited as audit:auto",
  async (t) => {
    await withRig(
      { "audit.auto_repair_kinds": { registered_wrong: "on", phone_missing: "off" } },
      async (rig) => {
        const [a, b] = await linkUsers(rig, 2);
        if (!a || !b) throw new Error("no users");
        const ca = rig.emulator.store.contacts.get(a.contactId);
        const cb = rig.emulator.store.contacts.get(b.contactId);
        if (!ca || !cb) throw new Error("no Contacts");
        ca.uf[F.registered] = 0; // switched on: repaired by the audit itself
        cb.phones = []; // switched off: waits for an admin
        const r = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { all: true });
        t.is(r.autoRepaired, 1);
        const repairs = await rig.db.pool.query(
          "select user_id, intent, requested_by, admin_action_id, kinds from bitrix_sync.drift_repairs",
        );
        t.deepEqual(repairs.rows, [
          {
            user_id: a.id,
            intent: "contact.map_or_create",
            requested_by: "audit:auto",
            admin_action_id: null,
            kinds: ["registered_wrong"],
          },
        ]);
        await waitFor(async () => ca.uf[F.registered] === 1, 30_000, "the flag set again");
        await finishedWorkflow(rig, a.id);
        await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { all: true });
        t.deepEqual(
          (await statusDrift(rig)).map((f) => [f.kind, f.user_id]),
          [["phone_missing", b.id]],
          "the repaired kind is gone, the other waits",
        );
      },
    );
    // Only "on" and "off" are accepted.
    const { rows } = await db.pool.query("select bitrix_sync._settings_errors($1) as e", [
      JSON.stringify({ "audit.auto_repair_kinds": { registered_wrong: "yes" } }),
    ]);
    t.deepEqual(rows[0].e, ['audit.auto_repair_kinds: every entry must be "on" or "off"']);
  },
);

test.serial(
  "sampled runs judge the user kinds a window of users at a time, from where the last one stopped; a full run judges every user",
  async (t) => {
    // Its own database: the windows walk every App user in id order.
    const own = await createTestDb();
    try {
      await setSettings(own, { "audit.users_per_run": 2 });
      // Five active users with nothing on the way (their intents taken away): five unmapped_user.
      const users: string[] = [];
      for (let i = 0; i < 5; i++) users.push((await makeUser(own.pool, { fold: false })).id);
      await own.pool.query("delete from han_app.sync_queue_journal");
      await own.pool.query("delete from han_app.sync_queue");
      users.sort();
      const run = async (all = false) => {
        const { rows } = await own.pool.query<{ lease_token: string }>(
          "select lease_token from bitrix_sync.claim_audit_run($1, true)",
          [all],
        );
        const lease = rows[0]?.lease_token;
        if (!lease) throw new Error("no audit run claimed");
        await own.pool.query("select bitrix_sync.refresh_user_drift($1, now())", [lease]);
        await own.pool.query("select bitrix_sync.finish_audit_run($1, 0, 0)", [lease]);
      };
      const found = async () =>
        (
          await own.pool.query<{ user_id: string }>(
            "select user_id from bitrix_sync.status_drift where kind = 'unmapped_user' order by user_id",
          )
        ).rows.map((r) => r.user_id);
      const round = async () =>
        (
          await own.pool.query<{ s: Date | null; e: Date | null }>(
            "select users_round_started_at as s, users_round_ended_at as e from bitrix_sync.status_audit",
          )
        ).rows[0];

      await run();
      t.deepEqual(await found(), users.slice(0, 2), "the first window: the first two users in id order");
      t.truthy((await round())?.s, "a round started");
      t.is((await round())?.e, null, "and has not ended");
      await run();
      t.deepEqual(await found(), users.slice(0, 4), "the second window goes on from there");
      await run();
      t.deepEqual(await found(), users, "the third reaches past the last user");
      t.truthy((await round())?.e, "the round ended");

      // The last user is linked now: its finding stays until its window comes round again.
      await own.pool.query("select bitrix_sync.open_mapping($1, '620001', null)", [users[4]]);
      await run();
      await run();
      t.deepEqual(await found(), users, "windows one and two of the new round leave it alone");
      await run();
      t.deepEqual(await found(), users.slice(0, 4), "its own window clears it");

      // A full run judges every user at once, and leaves the sampled runs' place as it was.
      await own.pool.query("select bitrix_sync.open_mapping($1, '620002', null)", [users[0]]);
      await own.pool.query("select bitrix_sync.open_mapping($1, '620003', null)", [users[3]]);
      const before = (await own.pool.query("select users_after_id from bitrix_sync.audit_state")).rows[0];
      await run(true);
      t.deepEqual(await found(), [users[1], users[2]], "both in-step users cleared in one full run");
      t.deepEqual(
        (await own.pool.query("select users_after_id from bitrix_sync.audit_state")).rows[0],
        before,
      );

      // A user with work on the way keeps its finding until the work is done.
      await own.pool.query("select bitrix_sync.open_mapping($1, '620004', null)", [users[2]]);
      await own.pool.query("update han_app.user_identity set phone_number = '+79990001122' where id = $1", [
        users[2],
      ]);
      await run(true);
      t.deepEqual(await found(), [users[1], users[2]], "an intent on the way keeps the finding");
      await own.pool.query("delete from han_app.sync_queue_journal");
      await run(true);
      t.deepEqual(await found(), [users[1]], "nothing on the way: cleared");

      // A window that ends on the last user ends the round: the next run starts from the first
      // instead of judging nobody.
      await setSettings(own, { "audit.users_per_run": 5 });
      await run();
      t.deepEqual((await own.pool.query("select users_after_id from bitrix_sync.audit_state")).rows[0], {
        users_after_id: null,
      });
    } finally {
      await own.drop();
    }
  },
);
