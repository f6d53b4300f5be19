// The convergence audit end to end (docs/workflows.md, "Convergence audit"): against the emulator,
// with the real graphile-worker and the service running as bitrix_sync_user, silent drift of every
// kind (a manager deletes a Contact, removes the App's phone, clears the user id, unticks or ticks
// the registration flag; a restore leaves the App behind the CRM, a user without a link, a link of a
// deactivated user) is found by a full audit queued by the admin, listed in status_drift, exported
// as metrics, repaired by repair_drift() through the ordinary workflows, and a second full audit
// finds nothing.
import { randomUUID } from "node:crypto";
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import type { StoredContact } from "../../tools/emulator/store.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { parseExposition } from "../helpers/exposition.js";
import { makeUser } from "../helpers/factories.js";
import { type RigHttp, serveRig } from "../helpers/rig-http.js";
import { asRole } from "../helpers/roles.js";

const F = SANDBOX_FIELDS;
let rig: Rig;
let http: RigHttp;

test.before(async () => {
  rig = await startRig({
    asRuntimeRole: true,
    settings: {
      // The crontab's runs stay out of the way: the test queues its runs as the admin would.
      "audit.enabled": false,
      "audit.grace_sec": 0,
      "reconcile.contacts_interval_sec": 86400,
    },
  });
  await rig.startWorker();
  http = await serveRig(rig);
  // Reconciliation's first run now, so the crontab's is not due during the test: what follows is
  // drift no webhook and no reconciliation brings back.
  await reconcileContacts(rig.runtime.services, rig.runtime.settings.get().reconcile, { force: true });
});
test.after.always(async () => {
  await http?.close();
  await rig?.close();
});

interface Linked {
  id: string;
  phone: string;
  contact: StoredContact;
}

async function linked(): Promise<Linked> {
  const u = await makeUser(rig.db.pool);
  must((await finishedWorkflow(rig, u.id)).state === "succeeded", "linked");
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = rig.emulator.store.contacts.get(Number(rows[0]?.external_id));
  if (!contact) throw new Error("no Contact linked");
  return { ...u, contact };
}

/** A precondition of the test's setup; failing it is not the behaviour under test. */
function must(v: boolean, what: string): void {
  if (!v) throw new Error(`setup failed: ${what}`);
}

/** Changes an App row the way a restore or a bulk job does: no trigger, so no intent. */
async function silently(sql: string, params: unknown[]): Promise<void> {
  const c = await rig.db.pool.connect();
  try {
    await c.query("begin");
    await c.query("set local han.sync_suppress = 'true'");
    await c.query(sql, params);
    await c.query("commit");
  } finally {
    c.release();
  }
}

async function fullAudit(): Promise<void> {
  const before = await audit();
  await asRole(rig.db.pool, "bitrix_sync_admin", (c) =>
    c.query("select bitrix_sync.request_convergence_audit('ops:test', 'after a restore from backup')"),
  );
  await waitFor(
    async () => {
      const a = await audit();
      return a.last_all_success_at && a.last_all_success_at > (before.last_all_success_at ?? 0) ? a : null;
    },
    60_000,
    "a full audit run",
  ).catch((e) => {
    console.log(
      rig.logs
        .filter((l) => /audit|worker\.log/.test(l))
        .slice(-30)
        .join(""),
    );
    throw e;
  });
}

async function audit(): Promise<{ last_all_success_at: Date | null; status: string | null }> {
  return await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const { rows } = await c.query("select * from bitrix_sync.status_audit");
    return rows[0];
  });
}

async function drift(): Promise<Array<{ user_id: string | null; contact_id: string | null; kind: string }>> {
  return await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const { rows } = await c.query(
      "select user_id, contact_id, kind, detected_at, repair from bitrix_sync.status_drift order by kind",
    );
    return rows;
  });
}

async function driftMetrics(): Promise<Record<string, number>> {
  const text = await (await fetch(`${http.url}/metrics`)).text();
  const f = parseExposition(text).get("bitrix_sync_drift_users");
  return Object.fromEntries((f?.samples ?? []).map((s) => [s.labels.kind as string, s.value]));
}

test.serial("silent drift of each kind is found, listed, exported, repaired, and then gone", async (t) => {
  // --- the drift -----------------------------------------------------------------------------
  const deleted = await linked();
  rig.emulator.store.contacts.delete(deleted.contact.id); // a manager deletes the Contact

  const phoneGone = await linked();
  phoneGone.contact.phones = phoneGone.contact.phones.filter((p) => p.value !== phoneGone.phone);
  rig.emulator.store.touch(phoneGone.contact); // ... removes the App's phone from it

  const idCleared = await linked();
  idCleared.contact.uf[F.userId] = null;
  rig.emulator.store.touch(idCleared.contact); // ... clears the user id field

  const unticked = await linked();
  unticked.contact.uf[F.registered] = 0;
  rig.emulator.store.touch(unticked.contact); // ... unticks the registration flag

  // A restore from backup: the App's CRM-master copy is older than the Contact.
  const behind = await linked();
  await silently(
    "update han_app.client_profile set full_name = 'Name Before The Restore' where user_id = $1",
    [behind.id],
  );

  // A restore: an active user the service never heard of after the cutover (no intent, no link).
  const unmappedId = randomUUID();
  await silently(
    `with u as (insert into han_app.user_identity (id, phone_number, record_status) values ($1, '+79990000001', 'active') returning id)
     insert into han_app.client_profile (user_id, full_name, record_status) select id, 'Restored', 'active' from u`,
    [unmappedId],
  );

  // A bulk job deactivated a linked user without the trigger.
  const deactivatedSilently = await linked();
  await silently("update han_app.user_identity set record_status = 'inactive' where id = $1", [
    deactivatedSilently.id,
  ]);

  // A user deactivated properly, whose Contact a manager then marks registered again.
  const reticked = await linked();
  await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
    reticked.id,
  ]);
  const deactivation = await finishedWorkflow(rig, reticked.id);
  t.is(deactivation.outcome, "deactivated");
  t.is(reticked.contact.uf[F.registered], 0);
  reticked.contact.uf[F.registered] = 1;
  rig.emulator.store.touch(reticked.contact);

  // A Contact registered for a user the App does not know (created in the CRM, or lost in a restore).
  const strangerId = randomUUID();
  const stranger = rig.emulator.store.createContact({
    name: "Someone Else",
    phones: [{ value: "+79990000002" }],
    uf: { [F.userId]: strangerId, [F.registered]: 1 },
  });

  // --- found, listed, exported ---------------------------------------------------------------
  await fullAudit();
  const expected = [
    ["contact_missing", deleted.id, String(deleted.contact.id), "contact.update"],
    ["crm_master_behind", behind.id, String(behind.contact.id), "contact.map_or_create"],
    [
      "inactive_user_linked",
      deactivatedSilently.id,
      String(deactivatedSilently.contact.id),
      "contact.deactivate",
    ],
    ["phone_missing", phoneGone.id, String(phoneGone.contact.id), "contact.map_or_create"],
    ["registered_inactive_user", reticked.id, String(reticked.contact.id), "contact.deactivate"],
    ["registered_unknown_user", strangerId, String(stranger.id), "contact.deactivate"],
    ["registered_wrong", unticked.id, String(unticked.contact.id), "contact.map_or_create"],
    ["unmapped_user", unmappedId, null, "contact.map_or_create"],
    ["user_id_wrong", idCleared.id, String(idCleared.contact.id), "contact.map_or_create"],
  ];
  const found = await drift();
  t.deepEqual(
    found.map((r) => [r.kind, r.user_id, r.contact_id, (r as unknown as { repair: string }).repair]),
    expected,
    "one finding per drifted user and kind, nothing else",
  );
  const metrics = await driftMetrics();
  for (const [kind] of expected) t.is(metrics[kind as string], 1, `bitrix_sync_drift_users{kind="${kind}"}`);

  // --- repair: a dry run first records nothing ------------------------------------------------
  const journalBefore = await rig.db.pool.query("select count(*)::int as n from bitrix_sync.drift_repairs");
  const preview = await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const { rows } = await c.query(
      "select user_id, intent, recorded from bitrix_sync.repair_drift('ops:test', 'restore of 2026-12-01', null, true)",
    );
    return rows;
  });
  t.is(preview.length, 9);
  t.true(preview.every((r) => r.recorded === false));
  t.is(
    (await rig.db.pool.query("select count(*)::int as n from bitrix_sync.drift_repairs")).rows[0].n,
    journalBefore.rows[0].n,
  );
  t.true(
    (await drift()).every(
      (r) => (r as unknown as { repair_requested_at: Date | null }).repair_requested_at == null,
    ),
  );

  const repaired = await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
    const { rows } = await c.query(
      "select user_id, intent, recorded from bitrix_sync.repair_drift('ops:test', 'restore of 2026-12-01')",
    );
    return rows;
  });
  t.is(repaired.length, 9, "one intent per drifted user");
  t.true(repaired.every((r) => r.recorded === true));
  const audited = await rig.db.pool.query(
    "select user_id, intent, requested_by, db_user, admin_action_id from bitrix_sync.drift_repairs order by user_id",
  );
  t.is(audited.rows.length, 9);
  t.true(
    audited.rows.every((r) => r.requested_by === "ops:test" && r.db_user === "postgres" && r.admin_action_id),
  );

  // --- the ordinary workflows bring each user back -------------------------------------------
  for (const id of [
    deleted.id,
    phoneGone.id,
    idCleared.id,
    unticked.id,
    behind.id,
    unmappedId,
    deactivatedSilently.id,
    reticked.id,
    strangerId,
  ]) {
    const wf = await finishedWorkflow(rig, id, 30_000);
    t.is(wf.state, "succeeded", `${id}: ${wf.workflow_type} ${wf.outcome} ${wf.last_error_code}`);
  }
  // What the CRM holds now.
  t.true(
    phoneGone.contact.phones.some((p) => p.value === phoneGone.phone),
    "the App's phone is back",
  );
  t.is(idCleared.contact.uf[F.userId], idCleared.id, "the user id is back");
  t.is(unticked.contact.uf[F.registered], 1, "the flag is set again");
  t.is(deactivatedSilently.contact.uf[F.registered], 0, "the inactive user's Contact is unregistered");
  t.is(reticked.contact.uf[F.registered], 0);
  t.is(stranger.uf[F.registered], 0, "the unknown user's Contact is unregistered");
  const names = await rig.db.pool.query("select full_name from han_app.client_profile where user_id = $1", [
    behind.id,
  ]);
  t.is(names.rows[0].full_name, behind.contact.name, "the App follows the CRM again");
  const links = await rig.db.pool.query<{ entity_id: string; status: string; close_reason: string | null }>(
    "select entity_id, status, close_reason from bitrix_sync.entity_external_mapping where entity_id = any($1) order by opened_at",
    [[deleted.id, unmappedId, deactivatedSilently.id]],
  );
  const linkOf = (id: string) =>
    links.rows.filter((r) => r.entity_id === id).map((r) => [r.status, r.close_reason]);
  t.deepEqual(linkOf(deleted.id), [["broken", "contact_not_found"]], "§5.2: the link is broken");
  t.deepEqual(linkOf(unmappedId), [["active", null]], "the unlinked user is linked");
  t.deepEqual(linkOf(deactivatedSilently.id), [["closed", "deactivated"]]);
  const alert = await rig.db.pool.query(
    "select alert_type, status from bitrix_sync.business_alerts where user_id = $1",
    [deleted.id],
  );
  t.deepEqual(alert.rows, [{ alert_type: "contact_not_found", status: "open" }], "a person is told");

  // --- a second audit finds nothing ----------------------------------------------------------
  await fullAudit();
  t.deepEqual(await drift(), [], "every kind in step again");
  const after = await driftMetrics();
  for (const [kind] of expected)
    t.is(after[kind as string], 0, `bitrix_sync_drift_users{kind="${kind}"} back to 0`);
});
