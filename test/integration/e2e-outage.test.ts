// Recovery after a total portal outage (issue 14): retries that wait only because the whole portal
// failed are brought forward as soon as it answers again (a probe while it is down, or the first
// success), and go out batch by batch through the limiter; a workflow waiting for an unanswered
// write keeps the wait for its late execution but not the backoff beyond it (issue 36). Nothing here
// is timed: the waits are pushed an hour away, so only the bringing forward can finish the workflows.
import test from "ava";
import { finishedWorkflow, type Rig, startRig, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";

let rig: Rig;
test.before(async () => {
  rig = await startRig({
    // A tight portal bucket: a burst of requests past the limiter would be refused with 503.
    emulator: { rate: { drainPerSec: 2, threshold: 4 } },
    settings: {
      "batch.size": 50,
      "limiter.refill_per_sec": 2,
      "limiter.burst": 2,
      "limiter.max_in_flight": 2,
      "retry.base_ms": 1000,
      "retry.max_ms": 600000,
    },
  });
  await rig.startWorker();
});
test.after.always(async () => {
  await rig?.close();
});

/** A new user whose search fails with the down portal: the pump has seen it fail as a whole. */
async function portalFailsForNewUser() {
  const user = await makeUser(rig.db.pool, { phone: randomPhone() });
  await waitFor(
    async () =>
      (
        await rig.db.pool.query(
          `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
            where w.user_id = $1 and c.status = 'retry_wait'`,
          [user.id],
        )
      ).rows.length > 0,
    30_000,
    "a batch failed as a whole",
  );
  return user;
}

test.serial(
  "after an outage the retries waiting for the portal are brought forward through the limiter",
  async (t) => {
    rig.emulator.failNext("INTERNAL_SERVER_ERROR", { times: Number.MAX_SAFE_INTEGER });
    const users = [];
    for (let i = 0; i < 3; i++) users.push(await makeUser(rig.db.pool, { phone: randomPhone() }));
    const ids = users.map((u) => u.id);
    const waiting = () =>
      rig.db.pool.query<{ id: string; last_error_code: string }>(
        `select c.id, c.last_error_code from bitrix_sync.crm_commands c
         join bitrix_sync.workflow_instances w on w.id = c.workflow_id
        where w.user_id = any($1::uuid[]) and c.status = 'retry_wait'`,
        [ids],
      );
    // Every user's search failed against the down portal and waits to be retried.
    await waitFor(async () => (await waiting()).rows.length === ids.length, 30_000, "three retries");
    t.true((await waiting()).rows.every((r) => r.last_error_code === "server_error"));
    // After minutes of outage the backoff is long: an hour away, as far as these retries know.
    await rig.db.pool.query(
      "update bitrix_sync.crm_commands set next_attempt_at = now() + interval '1 hour' where id = any($1::bigint[])",
      [(await waiting()).rows.map((r) => r.id)],
    );

    rig.emulator.clearFaults();
    const from = rig.emulator.log.length;
    for (const id of ids) t.is((await finishedWorkflow(rig, id, 30_000)).state, "succeeded");

    const after = rig.emulator.log.slice(from);
    t.is(after.filter((l) => l.status === 503).length, 0, "paced by the limiter: the portal refused nothing");
    t.true(after.every((l) => (l.batchSize ?? 1) <= 50));
    t.true(
      rig.logs.some((l) => l.includes('"event":"pump.portal_recovered"')),
      "the recovery is logged",
    );
    const { rows } = await rig.db.pool.query<{ n: number }>(
      `select count(*)::int as n from bitrix_sync.crm_commands c
       join bitrix_sync.workflow_instances w on w.id = c.workflow_id
      where w.user_id = any($1::uuid[]) and c.status not in ('succeeded')`,
      [ids],
    );
    t.is(rows[0]?.n, 0, "every command of these users succeeded; none was lost or left waiting");
  },
);

test.serial(
  "after an outage a wait for an unanswered create keeps its late-write settling but loses its backoff",
  async (t) => {
    // Every create is answered 503 (it may hide a commit: uncertain), so the workflow waits in
    // awaiting_late_write before it searches; after many attempts that wait is the backoff's, minutes.
    rig.emulator.failNext("INTERNAL_SERVER_ERROR", {
      method: "crm.contact.add",
      times: Number.MAX_SAFE_INTEGER,
    });
    const user = await makeUser(rig.db.pool, { phone: randomPhone() });
    const waitingWorkflow = async () => {
      const { rows } = await rig.db.pool.query<{ id: string; settles: string | null }>(
        `select id, step_data ->> 'late_write_settles_at' as settles from bitrix_sync.workflow_instances
          where user_id = $1 and state = 'waiting_retry' and last_error_code = 'awaiting_late_write'`,
        [user.id],
      );
      return rows[0];
    };
    const wf = await waitFor(waitingWorkflow, 30_000, "the create's late-write wait");
    t.truthy(wf.settles, "the step keeps when the late execution settles");
    t.true(new Date(wf.settles as string).getTime() <= Date.now() + 5_000, "seconds, not minutes");
    // As after minutes of outage: the backoff holds it an hour.
    await rig.db.pool.query(
      "update bitrix_sync.workflow_instances set next_attempt_at = now() + interval '1 hour' where id = $1",
      [wf.id],
    );
    // The portal fails as a whole for a moment (another user's search), then answers again.
    rig.emulator.clearFaults();
    rig.emulator.setOutage("INTERNAL_SERVER_ERROR");
    const other = await portalFailsForNewUser();
    rig.emulator.setOutage(null);

    // Only the recovery can finish it within the hour: searched by user id, not found, created once.
    t.is((await finishedWorkflow(rig, user.id, 30_000)).state, "succeeded");
    t.is((await finishedWorkflow(rig, other.id, 30_000)).state, "succeeded");
    const contacts = [...rig.emulator.store.contacts.values()].filter((c) =>
      Object.values(c.uf).includes(user.id),
    );
    t.is(contacts.length, 1, "one Contact: the create refused with 503 was not executed, and sent once more");
  },
);

test.serial(
  "after an outage an inbox event whose read failed with the portal is processed at once, not after its backoff",
  async (t) => {
    // A user already linked to a Contact, whose change in the CRM arrives as a webhook while the
    // portal is down: the receiver's read of the Contact fails with it.
    const user = await makeUser(rig.db.pool, { phone: randomPhone() });
    t.is((await finishedWorkflow(rig, user.id, 30_000)).state, "succeeded");
    const { rows: links } = await rig.db.pool.query<{ external_id: string }>(
      "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
      [user.id],
    );
    const contactId = links[0]?.external_id;
    if (!contactId) return t.fail("no link");
    rig.emulator.setOutage("INTERNAL_SERVER_ERROR");
    const { rows: rec } = await rig.db.pool.query<{ id: string }>(
      "select bitrix_sync.record_webhook('contact', 3, $1) as id",
      [contactId],
    );
    const inboxId = rec[0]?.id;
    const inbox = async () =>
      (
        await rig.db.pool.query<{ status: string; last_error_code: string | null; outcome: string | null }>(
          "select status, last_error_code, outcome from bitrix_sync.webhook_inbox where id = $1",
          [inboxId],
        )
      ).rows[0];
    await waitFor(async () => (await inbox())?.status === "retry_wait", 30_000, "the read failed");
    t.is((await inbox())?.last_error_code, "server_error");
    // As after minutes of outage: its backoff holds it an hour.
    await rig.db.pool.query(
      "update bitrix_sync.webhook_inbox set next_attempt_at = now() + interval '1 hour' where id = $1",
      [inboxId],
    );
    // The pump sees the portal fail as a whole (another user's search), then answer again.
    const other = await portalFailsForNewUser();
    rig.emulator.setOutage(null);

    // Only the recovery can process it within the hour.
    const done = await waitFor(
      async () => {
        const r = await inbox();
        return r?.status === "processed" ? r : undefined;
      },
      30_000,
      "the event processed after the recovery",
    );
    t.is(done.outcome, "applied");
    t.is((await finishedWorkflow(rig, other.id, 30_000)).state, "succeeded");
  },
);
