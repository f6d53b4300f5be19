// The whole App->CRM path and the CRM->App path run as bitrix_sync_user, the runtime role of §13:
// the grants are enough for the service, not just narrow enough for the negative tests.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import { reconcileContacts } from "../../src/inbound/reconcile.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig({ asRuntimeRole: true });
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

test.serial("the service's own connections run as bitrix_sync_user", async (t) => {
  const { rows } = await rig.runtime.pool.query<{ u: string }>("select current_user as u");
  t.is(rows[0]?.u, "bitrix_sync_user");
});

test.serial("create, update, deactivate and reconciliation work under the runtime role", async (t) => {
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  const wf = await finishedWorkflow(rig, u.id);
  t.is(wf.state, "succeeded");
  const contact = [...rig.emulator.store.contacts.values()].find((c) => c.uf[SANDBOX_FIELDS.userId] === u.id);
  t.truthy(contact);
  if (!contact) return;
  contact.name = "Role Test";
  rig.emulator.store.touch(contact);
  const r = await reconcileContacts(rig.runtime.services, rig.runtime.settings.get().reconcile, {
    force: true,
  });
  t.is(r.status, "succeeded");
  const p = await rig.db.pool.query("select full_name from han_app.client_profile where user_id = $1", [
    u.id,
  ]);
  t.is(p.rows[0].full_name, "Role Test");
  await rig.db.pool.query("update han_app.user_identity set record_status = 'inactive' where id = $1", [
    u.id,
  ]);
  const done = await finishedWorkflow(rig, u.id);
  t.is(done.outcome, "deactivated");
  t.is(contact.uf[SANDBOX_FIELDS.registered], 0);
});

test.serial("the receivers and inbox processing work under the runtime role", async (t) => {
  const u = await makeUser(rig.db.pool, { phone: randomPhone() });
  await finishedWorkflow(rig, u.id);
  const contact = [...rig.emulator.store.contacts.values()].find((c) => c.uf[SANDBOX_FIELDS.userId] === u.id);
  if (!contact) throw new Error("not linked");
  contact.name = "Via Robot";
  rig.emulator.store.touch(contact);
  const app = createApp({
    pool: rig.runtime.pool,
    log: rig.runtime.log,
    receiver: receiverConfig(rig.runtime.config),
  });
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${contact.id}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  const res = await app.request(`/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${contact.id}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: body.toString(),
  });
  t.is(res.status, 200);
  const p = await waitFor(async () => {
    const { rows } = await rig.db.pool.query(
      "select full_name from han_app.client_profile where user_id = $1",
      [u.id],
    );
    return rows[0]?.full_name === "Via Robot" ? rows[0] : null;
  });
  t.is(p.full_name, "Via Robot");
});

test.serial("readiness can check migrations and grants under the runtime role", async (t) => {
  const app = createApp({
    pool: rig.runtime.pool,
    log: rig.runtime.log,
    status: {
      config: rig.runtime.config,
      health: rig.runtime.health,
      limiter: rig.runtime.crm.limiter,
      settings: rig.runtime.settings,
    },
  });
  await rig.db.pool.query("select * from bitrix_sync.perform_cutover('test')");
  const res = await app.request("/health/ready");
  const body = (await res.json()) as { status: string; problems: string[] };
  t.like(body, { status: "ready", problems: [] });
  t.is(res.status, 200);
});

test.serial(
  "a rebind, the request closing with a failed one and an App change held during it work under the runtime role",
  async (t) => {
    const u = await makeUser(rig.db.pool, { phone: randomPhone() });
    await finishedWorkflow(rig, u.id);
    const ask = async (target: number) => {
      const { rows } = await rig.db.pool.query<{ id: string }>(
        "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'least privilege check', 'ops:test') as id",
        [u.id, String(target)],
      );
      return rows[0]?.id;
    };
    const outcome = (id: string | undefined) =>
      waitFor(async () => {
        const { rows } = await rig.db.pool.query(
          "select status, failure_code from bitrix_sync.rebind_requests where id = $1 and status not in ('requested', 'in_progress')",
          [id],
        );
        return rows[0];
      });
    // A target that does not exist: the trigger closes the request, as the runtime role.
    t.deepEqual(await outcome(await ask(999_999_999)), {
      status: "failed",
      failure_code: "target_not_found",
    });
    const target = rig.emulator.store.createContact({ phones: [{ value: randomPhone() }] });
    rig.emulator.setLatency(300);
    let id: string | undefined;
    try {
      id = await ask(target.id);
      await waitFor(async () => {
        const { rows } = await rig.db.pool.query(
          "select 1 from bitrix_sync.rebind_requests where id = $1 and status = 'in_progress'",
          [id],
        );
        return rows.length > 0;
      });
      // Held while the rebind runs; the runtime role's trigger starts it afterwards.
      await rig.db.pool.query("update han_app.user_identity set phone_number = $2 where id = $1", [
        u.id,
        randomPhone(),
      ]);
    } finally {
      rig.emulator.setLatency(0);
    }
    t.deepEqual(await outcome(id), { status: "succeeded", failure_code: null });
    const held = await rig.db.pool.query(
      "select held_intent_type from bitrix_sync.workflow_instances where user_id = $1 and workflow_type = 'contact.rebind' and state = 'succeeded'",
      [u.id],
    );
    t.deepEqual(held.rows, [{ held_intent_type: "contact.update" }]);
    const wf = await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        "select outcome from bitrix_sync.workflow_instances where user_id = $1 and workflow_type = 'contact.update' and state = 'succeeded'",
        [u.id],
      );
      return rows[0];
    });
    t.is(wf.outcome, "updated");
    t.is(target.uf[SANDBOX_FIELDS.userId], u.id);
  },
);
