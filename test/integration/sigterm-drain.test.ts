// SIGTERM under load (R8, docs/reliability.md "SIGTERM drain"): the real service stops claiming,
// lets the CRM requests already out finish within the HTTP timeout (their results are recorded, not
// cut off into uncertain), gives back every lease it holds, and exits 0 within its bound.
import test from "ava";
import pg from "pg";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { freePort } from "../../src/db/embedded.js";
import { type Emulator, startEmulator } from "../../tools/emulator/server.js";
import { waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { serviceEnv, startService } from "../helpers/service-process.js";
import { setSettings } from "../helpers/settings.js";
import { startTcpHop } from "../helpers/tcp-hop.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

/** The service's HTTP timeout in this test (testServiceEnv). */
const HTTP_TIMEOUT_SEC = 2;
/** The documented drain bound: the HTTP timeout of a request already out, plus 15 s. */
const DRAIN_BOUND_MS = (HTTP_TIMEOUT_SEC + 15) * 1000;
const MAX_IN_FLIGHT = 2;

let db: TestDb;
let emulator: Emulator;
test.before(async () => {
  db = await createTestDb();
  await setSettings(db, {
    "worker.poll_interval_ms": 300,
    "batch.max_wait_ms": 20,
    "batch.size": 5,
    "lease.ttl_sec": 60,
    "limiter.refill_per_sec": 20,
    "limiter.burst": 10,
    "limiter.max_in_flight": MAX_IN_FLIGHT,
    "retry.base_ms": 50,
    "retry.max_ms": 500,
  });
  // Every request takes 1.5 s: always something out when SIGTERM lands, always answered in time.
  emulator = await startEmulator({ fields: SANDBOX_FIELDS, latencyMs: 1_500 });
});
test.after.always(async () => {
  await emulator?.close();
  await db?.drop();
});

async function count(sql: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(sql);
  return rows[0]?.n ?? -1;
}

test.serial(
  "SIGTERM under load: in-flight requests finish and are recorded, every lease is given back, exit 0 within the bound",
  async (t) => {
    const svc = startService(serviceEnv(db.url, { url: emulator.url, host: emulator.host }));
    await waitFor(async () => svc.output.join("").includes("http.listening"), 30_000, "service start");
    for (let i = 0; i < 30; i++) await makeUser(db.pool, { phone: randomPhone() });
    const inFlight = await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ id: string }>(
          "select id from bitrix_sync.crm_commands where status = 'in_flight'",
        );
        return rows.length > 0 ? rows.map((r) => r.id) : null;
      },
      30_000,
      "a request out",
    );
    const sentAt = Date.now();
    svc.child.kill("SIGTERM");
    const code = await svc.exited;
    const tookMs = Date.now() - sentAt;
    t.log(`SIGTERM to exit: ${tookMs} ms (bound ${DRAIN_BOUND_MS} ms)`);
    t.is(code, 0, "a clean stop");
    t.true(tookMs <= DRAIN_BOUND_MS, `exited within the drain bound: ${tookMs} ms`);
    t.true(svc.output.join("").includes('"event":"shutdown.done"'));

    // The requests that were out finished: their commands have their results, none was cut off.
    const { rows: those } = await db.pool.query<{ status: string; last_error_code: string | null }>(
      "select status, last_error_code from bitrix_sync.crm_commands where id = any($1::bigint[])",
      [inFlight],
    );
    t.deepEqual(
      those.map((r) => r.status),
      inFlight.map(() => "succeeded"),
      "every request out at SIGTERM was answered and recorded",
    );
    const aborted = emulator.log.filter((e) => e.at < sentAt && e.status === 0).length;
    t.is(aborted, 0, "no request was cut off");
    // Claiming stopped: only batches whose permit was already granted (at most one per in-flight
    // slot) could still leave after SIGTERM.
    const after = emulator.log.filter((e) => e.at >= sentAt).length;
    t.true(after <= MAX_IN_FLIGHT, `${after} requests left after SIGTERM`);
    t.true(
      (await count(
        "select count(*)::int as n from bitrix_sync.crm_commands where status in ('pending', 'retry_wait')",
      )) +
        (await count(
          "select count(*)::int as n from bitrix_sync.workflow_instances where state not in ('succeeded', 'failed', 'cancelled')",
        )) >
        0,
      "work was left for the next replica: the load outlasted the drain",
    );

    // Every lease given back: nothing waits for its expiry (lease.ttl_sec is 60 s here).
    t.is(await count("select count(*)::int as n from han_app.sync_queue where lease_token is not null"), 0);
    t.is(
      await count(
        "select count(*)::int as n from bitrix_sync.workflow_instances where lease_token is not null",
      ),
      0,
    );
    t.is(
      await count("select count(*)::int as n from bitrix_sync.crm_commands where lease_token is not null"),
      0,
    );
    t.is(
      await count("select count(*)::int as n from bitrix_sync.webhook_inbox where lease_token is not null"),
      0,
    );
    t.is(
      await count("select count(*)::int as n from bitrix_sync.crm_inflight_slots where expires_at > now()"),
      0,
      "no in-flight slot of the limiter held",
    );
    t.is(
      await count(
        "select count(*)::int as n from bitrix_sync.reconciliation_cursors where last_run_status = 'running'",
      ),
      0,
    );
    t.is(
      await count("select count(*)::int as n from graphile_worker._private_jobs where locked_by is not null"),
      0,
      "no graphile-worker job left locked",
    );
  },
);

test.serial(
  "SIGTERM while the database answers nothing: the drain gives up on it and the service exits 0 within the bound",
  async (t) => {
    const url = new URL(db.url);
    const proxy = await startTcpHop({ host: url.hostname, port: Number(url.port || 5432) });
    url.hostname = "127.0.0.1";
    url.port = String(proxy.port);
    const svc = startService(serviceEnv(url.toString(), { url: emulator.url, host: emulator.host }));
    try {
      await waitFor(async () => svc.output.join("").includes("http.listening"), 30_000, "service start");
      for (let i = 0; i < 10; i++) await makeUser(db.pool, { phone: randomPhone() });
      await waitFor(
        async () => {
          const { rows } = await db.pool.query(
            "select 1 from bitrix_sync.crm_commands where status = 'in_flight'",
          );
          return rows.length > 0 ? true : null;
        },
        30_000,
        "a request out",
      );
      proxy.blackhole();
      const sentAt = Date.now();
      svc.child.kill("SIGTERM");
      const code = await svc.exited;
      const tookMs = Date.now() - sentAt;
      t.log(`SIGTERM to exit with the database unreachable: ${tookMs} ms (bound ${DRAIN_BOUND_MS} ms)`);
      t.is(code, 0);
      t.true(tookMs <= DRAIN_BOUND_MS, `exited within the drain bound: ${tookMs} ms`);
      const out = svc.output.join("");
      t.true(
        out.includes('"event":"shutdown.step_abandoned"'),
        "the steps that waited for the database were abandoned",
      );
      t.true(out.includes('"event":"shutdown.done"'));
    } finally {
      svc.child.kill("SIGKILL");
      await proxy.close();
    }
  },
);

test.serial(
  "SIGTERM while the service is still starting, its listener already live: it finishes starting, then drains and exits 0",
  async (t) => {
    // The runner starts after the listener is bound (src/main.ts); holding graphile-worker's
    // migrations table holds the start right there, with /health/live already answering.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    t.teardown(() => holder.end());
    await holder.query("begin");
    await holder.query("lock table graphile_worker.migrations in access exclusive mode");
    const port = await freePort();
    const svc = startService(
      serviceEnv(db.url, { url: emulator.url, host: emulator.host }, { PORT: String(port) }),
    );
    try {
      await waitFor(
        async () => {
          const r = await fetch(`http://127.0.0.1:${port}/health/live`).catch(() => null);
          return r?.status === 200 ? true : null;
        },
        30_000,
        "the listener live",
      );
      t.false(svc.output.join("").includes('"event":"http.listening"'), "still starting");
      svc.child.kill("SIGTERM");
      await waitFor(
        async () => (svc.output.join("").includes('"event":"shutdown.deferred"') ? true : null),
        10_000,
        "the stop kept for later",
      );
      await holder.query("rollback");
      const code = await svc.exited;
      t.is(code, 0, svc.output.join(""));
      const out = svc.output.join("");
      t.true(out.indexOf('"event":"http.listening"') < out.indexOf('"event":"shutdown.begin"'));
      t.true(out.includes('"event":"shutdown.done"'));
    } finally {
      svc.child.kill("SIGKILL");
    }
  },
);
