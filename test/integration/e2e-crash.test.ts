// The service process killed at each workflow step in turn, then restarted (§18 "service restart
// on each workflow step", "crash after CRM success before local commit"): no duplicate Contact, no
// lost intent, every workflow finishes.
import test from "ava";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type Emulator, startEmulator } from "../../tools/emulator/server.js";
import { waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { type Held, hold } from "../helpers/locks.js";
import { serviceEnv, startService } from "../helpers/service-process.js";
import { setSettings } from "../helpers/settings.js";
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

const byUser = (type: string, status: string) =>
  `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
    where w.user_id = $1 and c.command_type = '${type}' and c.status in (${status})`;

interface KillPoint {
  name: string;
  /** Taken before the user is created, to stall the service at this point. */
  before?: () => Promise<Held>;
  /** Once this query finds a row, `during` takes its lock. */
  arm?: string;
  during?: (userId: string) => Promise<Held>;
  /** The service is at the point when this returns true. */
  at: (userId: string) => Promise<boolean>;
}

const exists = async (sql: string, userId: string) => (await db.pool.query(sql, [userId])).rows.length > 0;

/** Each point is held open deliberately, so the kill lands exactly there, whatever the load. */
const KILL_POINTS: KillPoint[] = [
  {
    name: "intent claimed by intake, workflow not yet started",
    // Inserting a workflow waits for this lock; the claim itself does not.
    before: () => hold(db.pool, "lock table bitrix_sync.workflow_instances in share mode"),
    at: (u) => exists("select 1 from han_app.sync_queue where entity_id = $1 and status = 'leased'", u),
  },
  {
    name: "phone search in flight",
    at: (u) => exists(byUser("contact.find_by_phone", "'in_flight'"), u),
  },
  {
    name: "create issued, not yet sent",
    // Once the search is out, the limiter's bucket row is held: the create cannot get a permit.
    arm: byUser("contact.find_by_phone", "'in_flight'"),
    during: () => hold(db.pool, "select * from bitrix_sync.crm_rate_buckets for update"),
    at: (u) => exists(byUser("contact.add", "'pending', 'leased'"), u),
  },
  {
    name: "create in flight (send marker committed, request out)",
    at: (u) => exists(byUser("contact.add", "'in_flight'"), u),
  },
  {
    name: "the portal created the Contact, the local commit has not happened",
    // The workflow row is held: completing the create waits to wake it, after the reply is in.
    arm: byUser("contact.add", "'in_flight'"),
    during: (u) =>
      hold(db.pool, "select 1 from bitrix_sync.workflow_instances where user_id = $1 for update", [u]),
    at: async (u) => {
      const c = [...emulator.store.contacts.values()].find((x) => x.uf[SANDBOX_FIELDS.userId] === u);
      if (!c) return false;
      await new Promise((r) => setTimeout(r, 300)); // the reply reaches the service, which then waits
      return exists(byUser("contact.add", "'in_flight'"), u);
    },
  },
];

test.serial(
  "killed at every step and restarted: one Contact per user, every workflow finishes",
  async (t) => {
    const env = serviceEnv(db.url, { url: emulator.url, host: emulator.host });
    const users: string[] = [];
    for (const point of KILL_POINTS) {
      const svc = startService(env);
      const held: Held[] = [];
      try {
        // The user is made after the process has started: a user the App had before it is searched
        // by user id before a create (step/map-or-create.ts), a search these kill points do not hold.
        await waitFor(
          async () => svc.output.join("").includes('"http.listening"'),
          60_000,
          "the service to listen",
        );
        if (point.before) held.push(await point.before());
        const u = await makeUser(db.pool, { phone: randomPhone() });
        users.push(u.id);
        if (point.arm && point.during) {
          const arm = point.arm;
          await waitFor(() => exists(arm, u.id), 20_000, `arming ${point.name}`);
          held.push(await point.during(u.id));
        }
        await waitFor(() => point.at(u.id), 20_000, point.name);
      } finally {
        svc.child.kill("SIGKILL");
        await svc.exited;
        for (const h of held) await h.release();
      }
    }
    // Restart once more and let everything finish.
    const svc = startService(env);
    try {
      for (const [i, id] of users.entries()) {
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
        ).catch(async (e) => {
          const w = await db.pool.query(
            "select state, current_step, step_data, last_error_code, lease_token is not null as leased, locked_until, next_attempt_at from bitrix_sync.workflow_instances where user_id = $1",
            [id],
          );
          const c = await db.pool.query(
            "select c.id, c.command_type, c.status, c.last_error_code, c.locked_until, c.next_attempt_at from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id where w.user_id = $1 order by c.id",
            [id],
          );
          const q = await db.pool.query(
            "select status, locked_until from han_app.sync_queue where entity_id = $1",
            [id],
          );
          t.log("STUCK", i, JSON.stringify({ w: w.rows, c: c.rows, q: q.rows, now: new Date() }));
          t.log(
            svc.output
              .join("")
              .split("\n")
              .filter((l) => l.includes("warn") || l.includes("error"))
              .slice(-8)
              .join("\n"),
          );
          throw e;
        });
        t.truthy(wf);
        const contacts = [...emulator.store.contacts.values()].filter(
          (c) => c.uf[SANDBOX_FIELDS.userId] === id,
        );
        t.is(contacts.length, 1, `exactly one Contact for the user killed at "${KILL_POINTS[i]?.name}"`);
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
      const adds = emulator.log.flatMap((e) => e.commands).filter((m) => m === "crm.contact.add").length;
      t.is(adds, users.length, "one create sent per user: never a second, blind one");
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

test.serial(
  "BITRIX_SYNC_ENABLED=false: the service runs but claims nothing, and every pending row is kept",
  async (t) => {
    const env = serviceEnv(
      db.url,
      { url: emulator.url, host: emulator.host },
      { BITRIX_SYNC_ENABLED: "false" },
    );
    const svc = startService(env);
    try {
      await waitFor(async () => svc.output.join("").includes("http.listening"), 20_000, "service start");
      t.true(svc.output.join("").includes('"event":"sync.paused"'));
      const u = await makeUser(db.pool, { phone: randomPhone() });
      await new Promise((r) => setTimeout(r, 2500));
      const q = await db.pool.query("select status from han_app.sync_queue where entity_id = $1", [u.id]);
      t.deepEqual(
        q.rows.map((r) => r.status),
        ["pending"],
      );
      const w = await db.pool.query(
        "select count(*)::int as n from bitrix_sync.workflow_instances where user_id = $1",
        [u.id],
      );
      t.is(w.rows[0].n, 0);
    } finally {
      svc.child.kill("SIGTERM");
      await svc.exited;
    }
  },
);
