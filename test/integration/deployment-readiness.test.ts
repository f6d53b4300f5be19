// Readiness for the deployment, not the replica (§14, issue 32; sql/limiter/health.sql): two runtimes on
// one database and one portal (the emulator), as two replicas. Both see a long outage and report
// crm_stale. The portal comes back and one replica reaches it; the other, idle, is ready at its next
// readiness round without a request of its own, because the release of the first one's limiter slot
// recorded the answer on the bucket both share.
import { Writable } from "node:stream";
import test from "ava";
import { loadConfig, SANDBOX_FIELDS } from "../../src/config/env.js";
import { executeBatch } from "../../src/crm/batch.js";
import { readiness, type StatusSource } from "../../src/http/status.js";
import { createLogger } from "../../src/observability/logger.js";
import { buildRuntime, type Runtime } from "../../src/runtime.js";
import { startEmulator } from "../../tools/emulator/server.js";
import { testServiceEnv } from "../helpers/e2e.js";
import { one } from "../helpers/sql-core.js";
import { createTestDb } from "../helpers/testdb.js";

const log = createLogger({ destination: new Writable({ write: (_c, _e, cb) => cb() }) });

test("an idle replica is ready again as soon as another one reaches the portal", async (t) => {
  const db = await createTestDb();
  t.teardown(() => db.drop());
  const emulator = await startEmulator({ fields: SANDBOX_FIELDS });
  t.teardown(() => emulator.close());
  // A deployment whose portal contract was confirmed (npm run preflight -- --write), so readiness
  // speaks only of the portal's answers.
  await db.pool.query(
    "select bitrix_sync.record_crm_contract_probe($1, bitrix_sync.crm_contract_forms(), '00000000')",
    [emulator.host],
  );
  const config = loadConfig(testServiceEnv(emulator));
  const replica = async (): Promise<Runtime> => {
    const r = await buildRuntime({
      config,
      log,
      pool: db.pool,
      databaseUrl: db.url,
      crmEndpoint: { webhookUrl: emulator.url, portalHost: emulator.host },
      stopping: new AbortController().signal,
    });
    t.teardown(() => r.close());
    return r;
  };
  const [a, b] = [await replica(), await replica()];
  const source = (r: Runtime): StatusSource => ({
    config: r.config,
    health: r.health,
    limiter: r.crm.limiter,
    settings: r.settings,
  });
  const read = () => executeBatch(a.crmDeps, [{ type: "citizenship.list", params: {} }]);

  // The outage: both replicas' requests fail, and it began longer ago than health.crm_stale_sec
  // (300 s): each replica's last success (here: set back) is older than that.
  emulator.setOutage("INTERNAL_SERVER_ERROR");
  for (const r of [a, b]) {
    const [o] = await executeBatch(r.crmDeps, [{ type: "citizenship.list", params: {} }]);
    t.false(o?.ok);
    r.health.lastCrmSuccessAt = Date.now() - 400_000;
  }
  for (const r of [a, b])
    t.like(await readiness(db.pool, source(r)), { status: "degraded", problems: ["crm_stale"] });

  // The portal is back; replica a reaches it, replica b sends nothing.
  emulator.setOutage(null);
  const requests = emulator.log.length;
  const bSuccess = b.health.lastCrmSuccessAt;
  const [o] = await read();
  t.true(o?.ok);
  t.is(emulator.log.length, requests + 1, "one request, replica a's");
  const { answered } = await one<{ answered: Date | null }>(
    db.pool,
    "select bitrix_sync.crm_last_answered_at($1) as answered",
    [emulator.host],
  );
  t.truthy(answered, "the answer is on the shared bucket");

  t.deepEqual(await readiness(db.pool, source(b)), { status: "ready", problems: [] });
  t.is(b.health.lastCrmSuccessAt, bSuccess, "replica b made no request of its own");
  t.is(b.health.deploymentCrmSuccessAt, answered?.getTime() ?? -1);
  t.deepEqual(await readiness(db.pool, source(a)), { status: "ready", problems: [] });
});
