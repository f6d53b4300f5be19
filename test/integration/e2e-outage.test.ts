// Recovery after a total portal outage (issue 14): retries that wait only because the whole portal
// failed are brought forward as soon as it answers again (a probe while it is down, or the first
// success), and go out batch by batch through the limiter. Nothing here is timed: the retries are
// pushed an hour away, so only the bringing forward can finish the workflows.
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
});
test.after.always(async () => {
  await rig?.close();
});

test.serial(
  "after an outage the retries waiting for the portal are brought forward through the limiter",
  async (t) => {
    rig.emulator.failNext("INTERNAL_SERVER_ERROR", { times: Number.MAX_SAFE_INTEGER });
    await rig.startWorker();
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
