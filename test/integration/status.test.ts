// §14: readiness matrix, the internal status document and /metrics, through the real app.
import { Writable } from "node:stream";
import test from "ava";
import { loadConfig } from "../../src/config/env.js";
import { createPool } from "../../src/db/pools.js";
import { createApp } from "../../src/http/app.js";
import { CRM_STALE_MS, type StatusSource, WORKER_STALL_MS } from "../../src/http/status.js";
import { HealthState } from "../../src/observability/health.js";
import { createLogger } from "../../src/observability/logger.js";
import { loadConfigWithSecretFiles } from "../helpers/config.js";
import { makeUser } from "../helpers/factories.js";
import { createMemoryLimiter } from "../helpers/memory-limiter.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const TOKEN = "status-token-0b7c2d9e4f6a1c3e5b7d9f2a4c6e8b0d";
const log = createLogger({ destination: new Writable({ write: (_c, _e, cb) => cb() }) });

function source(env: Record<string, string>, health = new HealthState()): StatusSource {
  const config = loadConfigWithSecretFiles({ BITRIX_SYNC_SERVICE_TOKEN: TOKEN, ...env });
  health.beat();
  return {
    config,
    health,
    limiter: createMemoryLimiter({ settings: { refillPerSec: 2, burst: 5, maxInFlight: 2 } }),
    settings: { version: () => 1, problem: () => null },
  };
}

const PROD = {
  BITRIX_SYNC_ENABLED: "true",
  BITRIX_SYNC_CRM_REST_WEBHOOK_URL: "https://portal.example.invalid/rest/1/secretsecret/",
  BITRIX_SYNC_PORTAL_HOST: "portal.example.invalid",
  BITRIX_SYNC_PORTAL_MEMBER_ID: "member-1",
  BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: "t1-contact-token-value-0123456789abcdef",
  BITRIX_SYNC_ALERT_RECEIVER_TOKEN: "t2-alert-token-value-0123456789abcdef0",
  BITRIX_SYNC_HASH_KEY: "t3-hash-key-value-0123456789abcdef012345",
  BITRIX_SYNC_CONTACT_USER_ID_FIELD: "UF_CRM_1",
  BITRIX_SYNC_CONTACT_REGISTERED_FIELD: "UF_CRM_2",
  BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: "UF_CRM_3",
};

async function ready(src?: StatusSource) {
  const app = createApp({ pool: db.pool, log, ...(src ? { status: src } : {}) });
  const res = await app.request("/health/ready");
  return { code: res.status, body: (await res.json()) as { status: string; problems: string[] } };
}

test.serial("live answers without touching the database; ready checks migrations and grants", async (t) => {
  const app = createApp({ pool: db.pool, log });
  t.is((await app.request("/health/live")).status, 200);
  t.deepEqual(await ready(), { code: 200, body: { status: "ready", problems: [] } });
  t.deepEqual(await ready(source({})), { code: 200, body: { status: "ready", problems: [] } });
});

test.serial("production without cutover is not ready; after cutover it is", async (t) => {
  const r = await ready(source(PROD));
  t.is(r.code, 503);
  t.deepEqual(r.body.problems, ["cutover_not_performed"]);
  await db.pool.query("select * from bitrix_sync.perform_cutover('test')");
  t.deepEqual((await ready(source(PROD))).body, { status: "ready", problems: [] });
});

test.serial(
  "a stalled worker and a rejected credential are not-ready; a CRM outage is degraded",
  async (t) => {
    const stalled = new HealthState();
    const src = source(PROD, stalled);
    stalled.loopBeatAt = Date.now() - WORKER_STALL_MS - 1000;
    t.deepEqual((await ready(src)).body.problems, ["worker_stalled"]);

    const h = new HealthState();
    const s2 = source(PROD, h);
    h.noteCrm({ type: "reply", status: 401, body: {}, elapsedMs: 5 });
    const r = await ready(s2);
    t.is(r.code, 503);
    t.deepEqual(r.body.problems, ["crm_credential_rejected"]);
    h.noteCrm({ type: "reply", status: 200, body: {}, elapsedMs: 5 });
    t.is((await ready(s2)).body.status, "ready", "a success clears it");

    h.lastCrmSuccessAt = Date.now() - CRM_STALE_MS - 1000;
    h.noteCrm({ type: "network", sent: false, code: "ECONNREFUSED", elapsedMs: 5 });
    const d = await ready(s2);
    t.is(d.code, 200);
    t.deepEqual(d.body, { status: "degraded", problems: ["crm_stale"] });
  },
);

test.serial("status needs the service token and holds no PII, IDs or secrets", async (t) => {
  const u = await makeUser(db.pool, { fullName: "Secret Name" });
  await db.pool.query(
    "select bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('a', 64), $1, '777001', null, '[\"777002\"]', '{}', null)",
    [u.id],
  );
  const src = source(PROD);
  const app = createApp({ pool: db.pool, log, status: src });
  t.is((await app.request("/internal/sync/v1/status")).status, 401);
  t.is(
    (await app.request("/internal/sync/v1/status", { headers: { authorization: "Bearer wrong" } })).status,
    401,
  );
  const res = await app.request("/internal/sync/v1/status", {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  t.is(res.status, 200);
  const text = await res.text();
  const body = JSON.parse(text);
  t.is(body.mode, "full");
  t.true(body.queue.some((q: { status: string; count: number }) => q.status === "pending" && q.count >= 1));
  t.is(body.business_alerts[0].alert_type, "duplicate_contacts");
  for (const secret of [
    u.id,
    u.phone,
    "Secret Name",
    "777001",
    "777002",
    TOKEN,
    "secretsecret",
    "t1-contact-token-value",
  ]) {
    t.false(text.includes(secret), `status leaks ${secret.slice(0, 3)}…`);
  }
  const noToken = loadConfig({ SECRETS_SOURCE: "env" });
  const unconfigured = createApp({ pool: db.pool, log, status: { ...source({}), config: noToken } });
  t.is((await unconfigured.request("/internal/sync/v1/status")).status, 503);
});

test.serial("metrics report depths with low-cardinality labels only", async (t) => {
  const u = await makeUser(db.pool);
  const app = createApp({ pool: db.pool, log, status: source({}) });
  const res = await app.request("/metrics");
  t.is(res.status, 200);
  const text = await res.text();
  t.regex(text, /bitrix_sync_queue_depth\{status="pending"\} \d+/);
  t.regex(text, /bitrix_sync_business_alerts_open\{alert_type="duplicate_contacts"\} 1/);
  t.false(text.includes(u.id));
  t.false(text.includes(u.phone));
});

test.serial("the Bearer scheme is matched case-insensitively (RFC 7235)", async (t) => {
  const app = createApp({ pool: db.pool, log, status: source({}) });
  for (const scheme of ["Bearer", "bearer", "BEARER", "bEaReR"]) {
    const res = await app.request("/internal/sync/v1/status", {
      headers: { authorization: `${scheme} ${TOKEN}` },
    });
    t.is(res.status, 200, scheme);
  }
  for (const header of [`Basic ${TOKEN}`, `Bearer${TOKEN}`, `Bearer ${TOKEN}x`, TOKEN]) {
    const res = await app.request("/internal/sync/v1/status", { headers: { authorization: header } });
    t.is(res.status, 401);
  }
});

test.serial(
  "with the database down, status answers 503 with a reason and what the process knows",
  async (t) => {
    // Nothing listens on port 1 of loopback: every connection is refused at once.
    const down = createPool("postgres://postgres@127.0.0.1:1/postgres", "status");
    try {
      const app = createApp({ pool: down, log, status: source({}) });
      const res = await app.request("/internal/sync/v1/status", {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      t.is(res.status, 503);
      const body = (await res.json()) as Record<string, unknown>;
      t.is(body.error, "database_unreachable");
      t.deepEqual(body.readiness, { status: "not_ready", problems: ["database_unreachable"] });
      t.is(body.mode, "full");
      t.is(typeof body.worker, "object");

      const ready = await app.request("/health/ready");
      t.is(ready.status, 503);
      t.deepEqual(await ready.json(), { status: "not_ready", problems: ["database_unreachable"] });

      const metrics = await app.request("/metrics");
      t.is(metrics.status, 200);
      t.regex(await metrics.text(), /^bitrix_sync_metrics_database_up 0$/m);
    } finally {
      await down.end();
    }
  },
);
