// The real service process SIGKILLed at each step of a contact.rebind (§18 "service restart на
// каждом workflow step", "crash after CRM success before local commit"), each point held open with a
// lock so the kill lands exactly there whatever the load (as test/integration/e2e-crash.test.ts
// does for map_or_create). After a restart every request ends succeeded, the user has exactly one
// active link (the target), and the CRM holds the user on the target only.
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
const F = SANDBOX_FIELDS;
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
  emulator = await startEmulator({ fields: F, latencyMs: 400 });
});
test.after.always(async () => {
  await emulator?.close();
  await db?.drop();
});

interface Case {
  userId: string;
  previous: number;
  target: number;
  requestId?: string;
  workflowId?: string;
}

/** A command of the case's rebind workflow: `type[:set_user]` in one of `statuses`, at `step` if given. */
function command(type: string, statuses: string[], step?: string) {
  const [commandType, setUser] = type.split(":");
  return async (k: Case) => {
    const { rows } = await db.pool.query(
      `select 1 from bitrix_sync.crm_commands c join bitrix_sync.workflow_instances w on w.id = c.workflow_id
        where w.id = $1 and c.command_type = $2 and c.status = any($3)
          and ($4::text is null or c.params->>'set_user' = $4) and ($5::text is null or w.current_step = $5)`,
      [k.workflowId, commandType, statuses, setUser ?? null, step ?? null],
    );
    return rows.length > 0;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface KillPoint {
  name: string;
  /** Taken before the request, to stall the service at this point. */
  before?: () => Promise<Held>;
  /** Once this is true, `during` takes its lock. */
  arm?: (k: Case) => Promise<boolean>;
  during?: (k: Case) => Promise<Held>;
  /** The service is at the point when this returns true. */
  at: (k: Case) => Promise<boolean>;
}

const holdWorkflow = (k: Case) =>
  hold(db.pool, "select 1 from bitrix_sync.workflow_instances where id = $1 for update", [k.workflowId]);

const FIRST: KillPoint[] = [
  {
    name: "workflow claimed, the request not started yet",
    // The first step reads the App's profile; this lock stops it there.
    before: () => hold(db.pool, "lock table han_app.client_profile in access exclusive mode"),
    at: async (k) =>
      (
        await db.pool.query(
          "select 1 from bitrix_sync.workflow_instances where id = $1 and lease_token is not null",
          [k.workflowId],
        )
      ).rows.length > 0,
  },
  { name: "the read of both Contacts in flight", at: command("contact.read", ["in_flight"], "rebind_read") },
  {
    name: "the target write issued, not yet sent",
    // Once the read is out, the limiter's bucket row is held: the write cannot get a permit.
    arm: command("contact.read", ["in_flight"], "rebind_read"),
    during: () => hold(db.pool, "select * from bitrix_sync.crm_rate_buckets for update"),
    at: command("contact.update:self", ["pending", "leased"]),
  },
  { name: "the target write in flight", at: command("contact.update:self", ["in_flight"]) },
  {
    name: "the portal wrote the target, the local commit has not happened",
    // Completing the write waits to wake the workflow, after the reply is in.
    arm: command("contact.update:self", ["in_flight"]),
    during: holdWorkflow,
    at: async (k) => {
      if (emulator.store.contacts.get(k.target)?.uf[F.userId] !== k.userId) return false;
      await sleep(300);
      return command("contact.update:self", ["in_flight"])(k);
    },
  },
];

const SECOND: KillPoint[] = [
  {
    name: "the check read of the previous Contact in flight",
    at: command("contact.read", ["in_flight"], "rebind_check_previous"),
  },
  { name: "the clear in flight", at: command("contact.update:clear", ["in_flight"]) },
  {
    name: "the portal cleared the previous Contact, the local commit has not happened",
    arm: command("contact.update:clear", ["in_flight"]),
    during: holdWorkflow,
    at: async (k) => {
      if (emulator.store.contacts.get(k.previous)?.uf[F.userId]) return false;
      await sleep(300);
      return command("contact.update:clear", ["in_flight"])(k);
    },
  },
  {
    name: "both Contacts written, the link not moved yet",
    // complete_rebind locks the request row; the step that calls it waits here.
    arm: command("contact.update:clear", ["in_flight"]),
    during: (k) =>
      hold(db.pool, "select 1 from bitrix_sync.rebind_requests where id = $1 for update", [k.requestId]),
    at: async (k) => {
      if (!(await command("contact.update:clear", ["succeeded"])(k))) return false;
      await sleep(300);
      const { rows } = await db.pool.query(
        "select 1 from bitrix_sync.workflow_instances where id = $1 and state = 'running' and lease_token is not null",
        [k.workflowId],
      );
      return rows.length > 0;
    },
  },
];

/** Users linked to a Contact each (their map_or_create done), with a free target Contact each. */
async function linkedUsers(env: Record<string, string>, n: number): Promise<Case[]> {
  const svc = startService(env);
  try {
    const cases: Case[] = [];
    for (let i = 0; i < n; i++) {
      const u = await makeUser(db.pool, { phone: randomPhone() });
      const target = emulator.store.createContact({ name: "Target", phones: [{ value: randomPhone() }] });
      cases.push({ userId: u.id, previous: 0, target: target.id });
    }
    for (const k of cases) {
      const { external_id } = await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ external_id: string }>(
            "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
            [k.userId],
          );
          return rows[0];
        },
        30_000,
        `link of ${k.userId}`,
      );
      k.previous = Number(external_id);
    }
    // The map_or_create workflows are finished, so a rebind is accepted.
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(
          "select 1 from bitrix_sync.workflow_instances where user_id = any($1) and state not in ('succeeded', 'failed', 'cancelled')",
          [cases.map((k) => k.userId)],
        );
        return rows.length === 0;
      },
      30_000,
      "map_or_create finished",
    );
    return cases;
  } finally {
    svc.child.kill("SIGTERM");
    await svc.exited;
  }
}

async function killAtEach(t: import("ava").ExecutionContext, points: KillPoint[]) {
  const env = serviceEnv(db.url, { url: emulator.url, host: emulator.host });
  const cases = await linkedUsers(env, points.length);
  for (const [i, point] of points.entries()) {
    const k = cases[i] as Case;
    const svc = startService(env);
    const held: Held[] = [];
    try {
      if (point.before) held.push(await point.before());
      const { rows } = await db.pool.query<{ id: string }>(
        "select bitrix_sync.request_bitrix_contact_rebind($1, $2, 'crash test', 'ops:test') as id",
        [k.userId, String(k.target)],
      );
      k.requestId = rows[0]?.id;
      const { rows: wf } = await db.pool.query<{ workflow_id: string }>(
        "select workflow_id from bitrix_sync.rebind_requests where id = $1",
        [k.requestId],
      );
      k.workflowId = wf[0]?.workflow_id;
      if (point.arm && point.during) {
        const arm = point.arm;
        await waitFor(() => arm(k), 20_000, `arming ${point.name}`);
        held.push(await point.during(k));
      }
      await waitFor(() => point.at(k), 20_000, point.name);
    } finally {
      svc.child.kill("SIGKILL");
      await svc.exited;
      for (const h of held) await h.release();
    }
  }
  // Restart once more and let every rebind finish.
  const svc = startService(env);
  try {
    for (const [i, k] of cases.entries()) {
      const where = `killed at "${points[i]?.name}"`;
      const req = await waitFor(
        async () => {
          const { rows } = await db.pool.query(
            "select status, failure_code, outcome from bitrix_sync.rebind_requests where id = $1 and status <> 'requested' and status <> 'in_progress'",
            [k.requestId],
          );
          return rows[0];
        },
        60_000,
        `request ${where}`,
      ).catch(async (e) => {
        const w = await db.pool.query(
          "select state, current_step, last_error_code, lease_token is not null as leased, locked_until from bitrix_sync.workflow_instances where id = $1",
          [k.workflowId],
        );
        const c = await db.pool.query(
          "select command_type, params->>'set_user' as set_user, status, last_error_code from bitrix_sync.crm_commands where workflow_id = $1 order by id",
          [k.workflowId],
        );
        t.log("STUCK", where, JSON.stringify({ w: w.rows, c: c.rows, now: new Date() }));
        throw e;
      });
      t.deepEqual(req, { status: "succeeded", failure_code: null, outcome: "rebound" }, where);
      const { rows: links } = await db.pool.query(
        "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
        [k.userId],
      );
      t.deepEqual(
        links,
        [{ external_id: String(k.target) }],
        `exactly one active link, the target: ${where}`,
      );
      const carrying = [...emulator.store.contacts.values()].filter((c) => c.uf[F.userId] === k.userId);
      t.deepEqual(
        carrying.map((c) => c.id),
        [k.target],
        `the CRM holds the user on the target only: ${where}`,
      );
      t.is(emulator.store.contacts.get(k.target)?.uf[F.registered], 1, where);
      t.is(emulator.store.contacts.get(k.previous)?.uf[F.registered], 0, where);
    }
  } finally {
    svc.child.kill("SIGTERM");
    await svc.exited;
  }
}

test.serial(
  "killed at each step up to the target write, and restarted: every rebind completes once",
  async (t) => {
    await killAtEach(t, FIRST);
  },
);

test.serial(
  "killed at each step from the check of the previous Contact on, and restarted: every rebind completes once",
  async (t) => {
    await killAtEach(t, SECOND);
  },
);
