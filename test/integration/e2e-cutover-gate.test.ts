// The cutover gate (§17, issue 10): sync enabled against a portal (the emulator) and no cutover
// performed. The claim functions return nothing, so the service, running as bitrix_sync_user,
// processes none of the stub era's intents and nothing else either; the receivers still record;
// readiness says why; the sync loop idles without taking limiter permits. Once the admin performs
// the cutover, work recorded after the watermark flows and the stub-era intent stays cancelled.
import test from "ava";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser, queueRows, randomPhone } from "../helpers/factories.js";
import { one, rejectsWith } from "../helpers/sql-core.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig({ cutover: false, asRuntimeRole: true });
});
test.after.always(async () => {
  await rig?.close();
});

let stubEraUser = "";

function contactWebhook(contactId: string) {
  const body = new URLSearchParams([
    ["document_id[0]", "crm"],
    ["document_id[1]", "CCrmDocumentContact"],
    ["document_id[2]", `CONTACT_${contactId}`],
    ["auth[domain]", rig.emulator.host],
    ["auth[member_id]", TEST_MEMBER_ID],
  ]);
  return [
    `/bitrix/sync/webhook/contact?token=${TEST_CONTACT_TOKEN}&ID=${contactId}`,
    {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: body.toString(),
    },
  ] as const;
}

test.serial(
  "before the cutover nothing is claimed; the receivers record and readiness says why",
  async (t) => {
    // A stub-era intent, and a command that is due (an alert's), recorded before any cutover.
    stubEraUser = (await makeUser(rig.db.pool, { phone: randomPhone() })).id;
    const alert = await one<{ id: string }>(
      rig.db.pool,
      "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('b', 64), null)",
    );
    await rig.db.pool.query("select bitrix_sync.issue_alert_command($1, 'alert.add', '{}')", [alert.id]);

    await rig.startWorker();
    const app = createApp({
      pool: rig.runtime.pool,
      log: rig.runtime.log,
      receiver: receiverConfig(rig.runtime.config),
      status: {
        config: rig.runtime.config,
        health: rig.runtime.health,
        limiter: rig.runtime.crm.limiter,
        settings: rig.runtime.settings,
      },
    });
    const res = await app.request(...contactWebhook("4242"));
    t.is(res.status, 200, "the receiver records durably before the cutover");

    // The loop polls every 500 ms here: several rounds of every lane pass.
    await new Promise((r) => setTimeout(r, 2500));
    t.deepEqual(
      (await queueRows(rig.db.pool, stubEraUser)).map((r) => r.status),
      ["pending"],
    );
    const counts = await one<{ workflows: number; inbox: string[]; commands: string[]; buckets: number }>(
      rig.db.pool,
      `select (select count(*)::int from bitrix_sync.workflow_instances) as workflows,
            (select array_agg(status) from bitrix_sync.webhook_inbox) as inbox,
            (select array_agg(status) from bitrix_sync.crm_commands) as commands,
            (select count(*)::int from bitrix_sync.crm_rate_buckets) as buckets`,
    );
    t.deepEqual(counts, { workflows: 0, inbox: ["received"], commands: ["pending"], buckets: 0 });
    t.is(rig.emulator.store.contacts.size, 0, "no CRM call was made");

    const ready = await app.request("/health/ready");
    // Degraded, not 503: the receivers must stay behind the load balancer (the robot does not retry).
    t.is(ready.status, 200);
    t.like(await ready.json(), { status: "degraded", problems: ["cutover_not_performed"] });

    // The runtime role can neither open the gate nor move a watermark.
    await rejectsWith(t, rig.runtime.pool.query("select * from bitrix_sync.perform_cutover('svc')"), "42501");
  },
);

test.serial(
  "after the admin's cutover, work recorded since flows; the stub-era intent stays cancelled",
  async (t) => {
    const c = await rig.db.pool.connect();
    try {
      await c.query("set role bitrix_sync_admin");
      const { rows } = await c.query("select * from bitrix_sync.perform_cutover('ops:test')");
      t.is(rows[0].cancelled_count, 1);
    } finally {
      await c.query("reset role");
      c.release();
    }
    t.deepEqual(
      (await queueRows(rig.db.pool, stubEraUser)).map((r) => [r.status, r.cancel_reason]),
      [["cancelled", "initial_full_sync_cutover"]],
    );
    const u = await makeUser(rig.db.pool, { phone: randomPhone() });
    t.is((await finishedWorkflow(rig, u.id)).state, "succeeded");
    // The webhook that waited in the inbox is processed now.
    await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        "select 1 from bitrix_sync.webhook_inbox where status = 'processed'",
      );
      return rows.length > 0;
    });
    t.pass();
  },
);
