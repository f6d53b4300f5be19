// A PostgreSQL restart while creates are in flight (issue 36): the portal answers normally all along,
// the service process survives, and every user must reach the CRM within 30 s of the database's
// return (it took three minutes: the answers were lost, the creates waited out their lease and then
// a late-write window counted from it), with one Contact per user: a create that got no answer is
// never sent again before a search by the user id proves it did not land. A second test keeps the
// database away longer than the commands' lease, so the answers cannot be kept: the creates become
// uncertain, and their search waits for the reply deadline recorded with the send, not the lease.
//
// The test runs its own embedded PostgreSQL, which it stops and starts again, and the service as a
// child process with the production defaults of the timings involved (lease.ttl_sec 60,
// BITRIX_SYNC_HTTP_TIMEOUT_SEC 10, retry.base_ms 1000, retry.max_ms 300 s, worker.poll_interval_ms
// 2 s); the batch waits up to a second so that every user's create goes in one request.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test, { type ExecutionContext } from "ava";
import pg from "pg";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import { type EmbeddedServer, startEmbedded } from "../../src/db/embedded.js";
import { migrateDatabase } from "../../src/db/migrate.js";
import { withDatabase } from "../../src/db/url.js";
import { type Emulator, startEmulator } from "../../tools/emulator/server.js";
import { waitFor } from "../helpers/e2e.js";
import { makeUser, randomPhone } from "../helpers/factories.js";
import { type ServiceProcess, serviceEnv, startService } from "../helpers/service-process.js";
import { setSettings } from "../helpers/settings.js";

/** What the issue asks: every user in the CRM this soon after the database is back. */
const BOUND_MS = 30_000;
/** The portal's answer time: long enough for the restart to land while the creates are out. */
const LATENCY_MS = 1_500;
const USERS = 6;

let dir: string;
let server: EmbeddedServer;
let url: string;
let pool: pg.Pool;
let emulator: Emulator;

function openPool(): pg.Pool {
  const p = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: 2_000 });
  p.on("error", () => undefined);
  p.on("connect", (c) => c.on("error", () => undefined));
  return p;
}

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), "bitrix-sync-dbrestart-"));
  // initdb runs as the `postgres` system user when we are root: it must be able to enter the folder.
  chmodSync(dir, 0o755);
  server = await startEmbedded({ dir: join(dir, "pg"), persistent: true });
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query("create database bs_restart");
  await admin.end();
  url = withDatabase(server.url, "bs_restart");
  await migrateDatabase(url);
  pool = openPool();
  await pool.query("select * from bitrix_sync.perform_cutover('test')");
  // Production timings; the limiter has room for every user, and the batch waits for all of them.
  await setSettings(
    { pool },
    {
      "limiter.burst": 20,
      "limiter.refill_per_sec": 20,
      "limiter.max_in_flight": 4,
      "batch.max_wait_ms": 1000,
    },
  );
  emulator = await startEmulator({ fields: SANDBOX_FIELDS, latencyMs: LATENCY_MS });
  await pool.query(
    "select bitrix_sync.record_crm_contract_probe($1, bitrix_sync.crm_contract_forms(), '00000000')",
    [emulator.host],
  );
});
test.after.always(async () => {
  await pool?.end().catch(() => undefined);
  await emulator?.close();
  await server?.stop().catch(() => undefined);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const contactsOf = (userId: string) =>
  [...emulator.store.contacts.values()].filter((c) => c.uf[SANDBOX_FIELDS.userId] === userId);

async function addsInFlight(users: string[]): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from bitrix_sync.crm_commands c
       join bitrix_sync.workflow_instances w on w.id = c.workflow_id
      where w.user_id = any($1::uuid[]) and c.command_type = 'contact.add' and c.status = 'in_flight'`,
    [users],
  );
  return rows[0]?.n ?? 0;
}

/** Creates the portal has received so far. */
const sentAdds = () => emulator.log.flatMap((e) => e.commands).filter((m) => m === "crm.contact.add").length;

interface Scenario {
  /** How long the database stays away. */
  downMs: number;
  /** BITRIX_SYNC_HTTP_TIMEOUT_SEC of the service. */
  httpTimeoutSec: number;
  /** Every user must be linked within this long of the database's return. */
  boundMs: number;
}

/**
 * Starts the service, makes USERS users, stops the database while every user's create is out, starts
 * it again after `downMs`, and returns how long after its return the last workflow succeeded. Checks
 * one Contact per user, linked, and one create sent per user.
 */
async function restartWithCreatesInFlight(t: ExecutionContext, sc: Scenario): Promise<number> {
  const svc: ServiceProcess = startService(
    serviceEnv(
      url,
      { url: emulator.url, host: emulator.host },
      { BITRIX_SYNC_HTTP_TIMEOUT_SEC: String(sc.httpTimeoutSec) },
    ),
  );
  const addsBefore = sentAdds();
  emulator.setLatency(LATENCY_MS);
  try {
    await waitFor(async () => svc.output.join("").includes('"http.listening"'), 60_000, "the service");
    const users: string[] = [];
    for (let i = 0; i < USERS; i++) users.push((await makeUser(pool, { phone: randomPhone() })).id);
    // Every create is out (the portal holds each request LATENCY_MS): the database goes away now.
    await waitFor(async () => (await addsInFlight(users)) >= USERS, 30_000, "the creates in flight").catch(
      async (e) => {
        const { rows } = await pool.query(
          `select c.command_type, c.status, c.last_error_code, w.state, w.current_step from bitrix_sync.workflow_instances w
             left join bitrix_sync.crm_commands c on c.workflow_id = w.id where w.user_id = any($1::uuid[]) order by w.id, c.id`,
          [users],
        );
        t.log(JSON.stringify(rows));
        t.log(
          svc.output
            .join("")
            .split("\n")
            .filter((l) => /warn|error/.test(l))
            .slice(-10)
            .join("\n"),
        );
        throw e;
      },
    );
    await pool.end();
    await server.stop();
    // The requests already out keep their delay; the ones after the return are answered at once.
    emulator.setLatency(50);
    await new Promise((r) => setTimeout(r, sc.downMs));
    server = await startEmbedded({ dir: join(dir, "pg"), persistent: true });
    const back = Date.now();
    pool = openPool();
    t.true(
      users.every((u) => contactsOf(u).length === 1),
      "the portal executed every create while the database was away",
    );

    const done = async () => {
      const { rows } = await pool.query<{ n: number }>(
        "select count(*)::int as n from bitrix_sync.workflow_instances where user_id = any($1::uuid[]) and state = 'succeeded'",
        [users],
      );
      return (rows[0]?.n ?? 0) === users.length;
    };
    await waitFor(done, sc.boundMs + 1_000, "every workflow succeeded").catch(async (e) => {
      const { rows } = await pool.query(
        `select w.state, w.current_step, w.last_error_code, w.attempt_count, w.next_attempt_at, w.locked_until,
                c.command_type, c.status, c.last_error_code as command_code, c.sent_at, c.updated_at
           from bitrix_sync.workflow_instances w
           left join lateral (select * from bitrix_sync.crm_commands c where c.workflow_id = w.id
                               order by c.updated_at desc limit 1) c on true
          where w.user_id = any($1::uuid[]) and w.state <> 'succeeded'`,
        [users],
      );
      t.log("not finished", Date.now() - back, "ms after the return:", JSON.stringify(rows));
      throw e;
    });
    const tookMs = Date.now() - back;

    for (const u of users) {
      const contacts = contactsOf(u);
      t.is(contacts.length, 1, "one Contact per user: no second, blind create");
      const { rows } = await pool.query<{ external_id: string }>(
        "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
        [u],
      );
      t.is(rows[0]?.external_id, String(contacts[0]?.id), "linked to the Contact the create made");
    }
    t.is(sentAdds() - addsBefore, USERS, "one create sent per user");
    return tookMs;
  } finally {
    svc.child.kill("SIGTERM");
    await svc.exited;
  }
}

test.serial("a database restart with creates in flight: every user in the CRM within 30 s", async (t) => {
  t.timeout(180_000);
  // The portal answers while the database is away; the service keeps the answers and records them
  // once it is back (src/workflows/pump-settle.ts).
  const tookMs = await restartWithCreatesInFlight(t, {
    downMs: 3_000,
    httpTimeoutSec: 10,
    boundMs: BOUND_MS,
  });
  t.log(`every user in the CRM ${(tookMs / 1000).toFixed(1)} s after the database returned`);
  t.true(tookMs <= BOUND_MS, `${tookMs} ms after the database returned`);
});

test.serial(
  "a database away longer than the lease: the lookup waits for the reply deadline, not the lease",
  async (t) => {
    t.timeout(180_000);
    // The answers cannot be kept past the commands' 5 s lease: once the database is back, the
    // creates become uncertain (lease_expired_in_flight) and each is searched for by its user id
    // once a late execution could no longer land: 3 × (2 s window + 2 s HTTP timeout) = 12 s after
    // its send, about 2 s after the return. Counted from the lease expiry instead, as before, the
    // search came 3 × 10 s after the send: about 20 s after the return, and the user was linked
    // about 30 s after it.
    await setSettings({ pool }, { "lease.ttl_sec": 5 });
    try {
      const tookMs = await restartWithCreatesInFlight(t, {
        downMs: 9_000,
        httpTimeoutSec: 2,
        boundMs: 15_000,
      });
      t.log(`every user in the CRM ${(tookMs / 1000).toFixed(1)} s after the database returned`);
      t.true(tookMs <= 15_000, `${tookMs} ms after the database returned`);
      const { rows } = await pool.query<{ n: number }>(
        "select count(*)::int as n from bitrix_sync.crm_commands where command_type = 'contact.add' and response ->> 'recovered' = 'true'",
      );
      // Usually every create is found by the recovery search. On a loaded machine a sender may
      // still record its answer under its own lease token before another claim takes the expired
      // lease (the fence is the token, not the clock): then there was nothing to search for. Either
      // way no create went twice (checked above), and the bound holds.
      const recovered = rows[0]?.n ?? 0;
      t.log(
        `${recovered} of ${USERS} creates found by the recovery search, the rest recorded by their sender`,
      );
    } finally {
      await setSettings({ pool }, { "lease.ttl_sec": 60 });
    }
  },
);
