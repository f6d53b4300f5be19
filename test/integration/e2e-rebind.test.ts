// contact.rebind (§5.4) end to end: an admin's request moves a user's link to another Contact
// through the worker and the emulator; the mapping, the request and the user's conflict alerts
// change together at the end (bitrix_sync.complete_rebind).
import { randomBytes } from "node:crypto";
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
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

async function linked() {
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  const contact = rig.emulator.store.contacts.get(Number(rows[0]?.external_id));
  if (!contact) throw new Error("no Contact linked");
  return { u, contact };
}

async function rebind(userId: string, target: number) {
  const { rows } = await rig.db.pool.query<{ id: string }>(
    "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'duplicate merged by the CRM team', 'ops:test') as id",
    [userId, String(target)],
  );
  const id = rows[0]?.id;
  return await waitFor(async () => {
    const r = await rig.db.pool.query(
      "select status, failure_code from bitrix_sync.rebind_requests where id = $1 and status in ('succeeded', 'failed')",
      [id],
    );
    return r.rows[0];
  }, 20_000);
}

test.serial("a rebind moves the link to the target Contact and resolves the user's conflicts", async (t) => {
  const { u, contact: previous } = await linked();
  const target = rig.emulator.store.createContact({
    name: "The right one",
    phones: [{ value: randomPhone() }],
  });
  const { rows: alert } = await rig.db.pool.query<{ id: string }>(
    "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, $2)",
    [randomBytes(32).toString("hex"), u.id],
  );

  t.deepEqual(await rebind(u.id, target.id), { status: "succeeded", failure_code: null });
  t.is(target.uf[F.userId], u.id);
  t.is(target.uf[F.registered], 1);
  t.falsy(previous.uf[F.userId], "the previous Contact no longer carries the user");
  t.is(previous.uf[F.registered], 0);
  const { rows: links } = await rig.db.pool.query(
    "select external_id, status, close_reason from bitrix_sync.entity_external_mapping where entity_id = $1 order by opened_at",
    [u.id],
  );
  t.deepEqual(links, [
    { external_id: String(previous.id), status: "closed", close_reason: "rebound" },
    { external_id: String(target.id), status: "active", close_reason: null },
  ]);
  const { rows: alerts } = await rig.db.pool.query(
    "select status from bitrix_sync.business_alerts where id = $1",
    [alert[0]?.id],
  );
  t.deepEqual(alerts, [{ status: "resolved" }]);
  const { rows: wf } = await rig.db.pool.query(
    "select state, outcome from bitrix_sync.workflow_instances where user_id = $1 and workflow_type = 'contact.rebind'",
    [u.id],
  );
  t.deepEqual(wf, [{ state: "succeeded", outcome: "rebound" }]);
});

test.serial(
  "a rebind to a Contact held by another active user fails and leaves the link alone",
  async (t) => {
    const { u, contact } = await linked();
    const other = await linked();
    // The target carries another active user's id in the CRM but no mapping, so the request is
    // accepted and only the workflow's read of the target can refuse it.
    const target = rig.emulator.store.createContact({ uf: { [F.userId]: other.u.id, [F.registered]: 1 } });
    t.deepEqual(await rebind(u.id, target.id), {
      status: "failed",
      failure_code: "target_bound_to_other_user",
    });
    t.is(target.uf[F.userId], other.u.id, "the target was not touched");
    const { rows } = await rig.db.pool.query(
      "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
      [u.id],
    );
    t.deepEqual(rows, [{ external_id: String(contact.id) }]);
  },
);
