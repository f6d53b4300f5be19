// The hot pause on a running service (§17, issue 32): the real sync loop under the runtime role,
// against the emulator. An admin pauses: within a poll interval nothing more is claimed and no
// request goes to the portal, while the receivers record; readiness says degraded/paused and the
// status document shows who paused and why. The admin resumes: the work recorded meanwhile flows,
// without a restart.
import test from "ava";
import { pauseSync, resumePreview, resumeSync, waitDrained } from "../../scripts/drill/pause.js";
import { createApp } from "../../src/http/app.js";
import { receiverConfig } from "../../src/inbound/config.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_CONTACT_TOKEN,
  TEST_MEMBER_ID,
  TEST_SERVICE_TOKEN,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser, queueRows, randomPhone } from "../helpers/factories.js";
import { one } from "../helpers/sql-core.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig({ asRuntimeRole: true });
});
test.after.always(async () => {
  await rig?.close();
});

function app() {
  return createApp({
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
}

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
  "a pause stops the running loop within a poll interval and a resume restarts it, no restart needed",
  async (t) => {
    await rig.startWorker();
    // The loop works before the pause.
    const first = await makeUser(rig.db.pool, { phone: randomPhone() });
    t.is((await finishedWorkflow(rig, first.id)).state, "succeeded");

    // As a drill scripts it (scripts/drill/pause.ts).
    const p = await pauseSync(rig.db.pool, "ops:drill", "portal maintenance window");
    // Within one poll interval (500 ms here) whatever a lane was doing has finished.
    t.true(await waitDrained(rig.db.pool, 10_000));
    const requestsAtPause = rig.emulator.log.length;

    const paused = await makeUser(rig.db.pool, { phone: randomPhone() });
    const a = app();
    t.is((await a.request(...contactWebhook("4242"))).status, 200, "the receivers record while paused");
    // Several rounds of every lane.
    await new Promise((r) => setTimeout(r, 2500));
    t.deepEqual(
      (await queueRows(rig.db.pool, paused.id)).map((r) => r.status),
      ["pending"],
      "the intent waits",
    );
    const inbox = await one<{ status: string }>(
      rig.db.pool,
      "select status from bitrix_sync.webhook_inbox where entity_id = '4242'",
    );
    t.is(inbox.status, "received");
    t.is(rig.emulator.log.length, requestsAtPause, "no request went to the portal while paused");

    const ready = await a.request("/health/ready");
    t.is(ready.status, 200, "degraded, not 503: the receivers stay behind the load balancer");
    t.like(await ready.json(), { status: "degraded", problems: ["paused"] });
    const status = await a.request("/internal/sync/v1/status", {
      headers: { authorization: `Bearer ${TEST_SERVICE_TOKEN}` },
    });
    const doc = (await status.json()) as { pause: Record<string, unknown> | null };
    t.like(doc.pause, {
      pause_id: p.pauseId,
      by: "ops:drill",
      reason: "portal maintenance window",
      drained: true,
    });

    const waiting = await resumePreview(rig.db.pool);
    t.true(waiting.some((r) => r.section === "queue" && r.item === "pending" && r.count >= 1));
    t.true(waiting.some((r) => r.section === "webhooks" && r.item === "contact received" && r.count === 1));
    await resumeSync(rig.db.pool, "ops:drill", "window over");
    t.is(
      (await finishedWorkflow(rig, paused.id)).state,
      "succeeded",
      "the intent recorded while paused is synced",
    );
    await waitFor(async () => {
      const { rows } = await rig.db.pool.query(
        "select 1 from bitrix_sync.webhook_inbox where entity_id = '4242' and status = 'processed'",
      );
      return rows.length > 0;
    });
    // The readiness cache holds an answer for a second.
    await new Promise((r) => setTimeout(r, 1100));
    t.like(await (await a.request("/health/ready")).json(), { status: "ready", problems: [] });
    const after = (await (
      await a.request("/internal/sync/v1/status", {
        headers: { authorization: `Bearer ${TEST_SERVICE_TOKEN}` },
      })
    ).json()) as { pause: unknown };
    t.is(after.pause, null);
  },
);
