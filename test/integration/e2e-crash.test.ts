// The service process killed at each workflow step in turn, then restarted (§18 "service restart
// on each workflow step", "crash after CRM success before local commit"): no duplicate Contact, no
// lost intent, every workflow finishes.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type Emulator, startEmulator } from "../../src/emulator/server.js";
import { setSettings, waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { serviceEnv, startService } from "../helpers/service-process.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
let emulator: Emulator;
test.before(async () => {
  db = await createTestDb();
  await setSettings(db, {
    "worker.poll_interval_ms": 300,
    "batch.max_wait_ms": 20,
    "lease.ttl_sec": 5,
    "limiter.refill_per_sec": 20,
    "limiter.burst": 10,
    "retry.base_ms": 50,
    "retry.max_ms": 500,
  });
  emulator = await startEmulator({ fields: SANDBOX_FIELDS, latencyMs: 400 });
});
test.after.always(async () => {
  await emulator?.close();
  await db?.drop();
});

/** Moments to kill the process at, each observable for at least the emulator's latency. */
const KILL_POINTS: Array<{ name: string; sql: string }> = [
  {
    name: "intent claimed by intake",
    sql: "select 1 from han_app.sync_queue where entity_id = $1 and status = 'leased'",
  },
  {
    name: "phone search in flight",
    sql: `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
           where w.user_id = $1 and c.command_type = 'contact.find_by_phone' and c.status = 'in_flight'`,
  },
  {
    name: "create issued, not yet sent",
    sql: `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
           where w.user_id = $1 and c.command_type = 'contact.add' and c.status in ('pending', 'leased')`,
  },
  {
    name: "create in flight (send marker committed, request out)",
    sql: `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
           where w.user_id = $1 and c.command_type = 'contact.add' and c.status = 'in_flight'`,
  },
  {
    name: "create answered, workflow not yet finished",
    sql: `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
           where w.user_id = $1 and c.command_type = 'contact.add' and c.status = 'succeeded' and w.state <> 'succeeded'`,
  },
];

test.serial(
  "killed at every step and restarted: one Contact per user, every workflow finishes",
  async (t) => {
    const env = serviceEnv(db.url, { url: emulator.url, host: emulator.host });
    const users: string[] = [];
    const observed: string[] = [];
    for (const point of KILL_POINTS) {
      const svc = startService(env);
      const u = await makeUser(db.pool, { phone: randomPhone() });
      users.push(u.id);
      const seen = await waitFor(
        async () => (await db.pool.query(point.sql, [u.id])).rows.length > 0,
        15_000,
        point.name,
      ).catch(() => false);
      svc.child.kill("SIGKILL");
      await svc.exited;
      if (seen) observed.push(point.name);
    }
    // Restart once more and let everything finish.
    const svc = startService(env);
    try {
      for (const id of users) {
        const wf = await waitFor(
          async () => {
            const { rows } = await db.pool.query(
              "select state, outcome from bitrix_sync.workflow_instances where user_id = $1 order by created_at desc limit 1",
              [id],
            );
            return rows[0]?.state === "succeeded" ? rows[0] : null;
          },
          60_000,
          `workflow of ${id}`,
        );
        t.truthy(wf);
        const contacts = [...emulator.store.contacts.values()].filter(
          (c) => c.uf[SANDBOX_FIELDS.userId] === id,
        );
        t.is(
          contacts.length,
          1,
          `exactly one Contact for the user killed at "${KILL_POINTS[users.indexOf(id)]?.name}"`,
        );
        const m = await db.pool.query(
          "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
          [id],
        );
        t.is(m.rows[0]?.external_id, String(contacts[0]?.id));
      }
      const q = await db.pool.query(
        "select count(*)::int as n from han_app.sync_queue where entity_id = any($1) and status <> 'processed'",
        [users],
      );
      t.is(q.rows[0].n, 0, "no intent lost or left behind");
      t.true(
        observed.includes("create in flight (send marker committed, request out)"),
        `observed: ${observed.join(", ")}`,
      );
      t.true(observed.length >= 4, `kill points observed: ${observed.join(", ")}`);
    } finally {
      svc.child.kill("SIGTERM");
      await svc.exited;
    }
  },
);

test.serial(
  "SIGTERM stops claiming and exits within the bound; pending work is kept and resumed",
  async (t) => {
    const env = serviceEnv(db.url, { url: emulator.url, host: emulator.host });
    const svc = startService(env);
    await waitFor(async () => svc.output.join("").includes("http.listening"), 20_000, "service start");
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push((await makeUser(db.pool, { phone: randomPhone() })).id);
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    svc.child.kill("SIGTERM");
    const code = await svc.exited;
    const took = Date.now() - started;
    t.is(code, 0);
    t.true(took < 15_000, `stopped in ${took} ms`);
    t.true(svc.output.join("").includes("shutdown.done"));
    const inflight = await db.pool.query(
      "select count(*)::int as n from bitrix_sync.crm_commands where status = 'in_flight'",
    );
    t.is(inflight.rows[0].n, 0, "no request left in flight");
    const again = startService(env);
    try {
      for (const id of ids) {
        await waitFor(
          async () =>
            (
              await db.pool.query(
                "select 1 from bitrix_sync.workflow_instances where user_id = $1 and state = 'succeeded'",
                [id],
              )
            ).rows.length > 0,
          60_000,
          `workflow of ${id}`,
        );
      }
      t.pass();
    } finally {
      again.child.kill("SIGTERM");
      await again.exited;
    }
  },
);
