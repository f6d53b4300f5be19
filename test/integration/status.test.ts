// §14: readiness matrix, the internal status document and /metrics, through the real app.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import test from "ava";
import { loadConfig } from "../../src/config/env.js";
import { classify } from "../../src/crm/classify.js";
import { createPool } from "../../src/db/pools.js";
import { releaseSchema } from "../../src/db/schema-window.js";
import { HealthState } from "../../src/health/state.js";
import { createApp } from "../../src/http/app.js";
import { type StatusSource, WORKER_STALL_MS } from "../../src/http/status.js";
import { projectRoot } from "../../src/local/project-root.js";
import { createLogger } from "../../src/observability/logger.js";
import { gitRevision, SERVICE_REVISION, SERVICE_VERSION } from "../../src/version.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import { loadConfigWithSecretFiles } from "../helpers/config.js";
import { makeUser } from "../helpers/factories.js";
import { createMemoryLimiter } from "../helpers/memory-limiter.js";
import { forceActiveSettingValue, setSettings, testSettings } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  // The first test performs the cutover.
  db = await createTestDb({ cutover: false });
});
test.after.always(async () => {
  await db?.drop();
});

const TOKEN = "status-token-0b7c2d9e4f6a1c3e5b7d9f2a4c6e8b0d";
const log = createLogger({ destination: new Writable({ write: (_c, _e, cb) => cb() }) });

function source(
  env: Record<string, string>,
  health = new HealthState(),
  settings: Record<string, unknown> = {},
): StatusSource {
  const config = loadConfigWithSecretFiles({ BITRIX_SYNC_SERVICE_TOKEN: TOKEN, ...env });
  health.beat();
  const s = testSettings(settings);
  return {
    config,
    health,
    limiter: createMemoryLimiter({ settings: { refillPerSec: 2, burst: 5, maxInFlight: 2 } }),
    settings: { get: () => s, version: () => 1, problem: () => null },
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

/** GET /health/ready: the code and the readiness (the build it carries is checked on its own). */
async function ready(src?: StatusSource) {
  const app = createApp({ pool: db.pool, log, ...(src ? { status: src } : {}) });
  const res = await app.request("/health/ready");
  const {
    build: _build,
    schema: _schema,
    ...body
  } = (await res.json()) as {
    status: string;
    problems: string[];
    build: unknown;
    schema: unknown;
  };
  return { code: res.status, body };
}

async function statusBody(src: StatusSource) {
  const app = createApp({ pool: db.pool, log, status: src });
  const res = await app.request("/internal/sync/v1/status", {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  return (await res.json()) as { crm_contract: Record<string, unknown> | null; readiness: unknown };
}

test.serial(
  "a portal's contract is unconfirmed (degraded) until a write probe passed there with the forms in use; the sandbox is never asked",
  async (t) => {
    t.deepEqual((await ready(source(PROD))).body.problems, [
      "cutover_not_performed",
      "crm_contract_unconfirmed",
    ]);
    t.deepEqual((await ready(source({}))).body.problems, ["cutover_not_performed"], "sandbox: the emulator");
    const before = await statusBody(source(PROD));
    t.like(before.crm_contract, { confirmed: false, confirmed_at: null, last_pass_at: null });
    t.is((await statusBody(source({}))).crm_contract, null);

    // What npm run preflight -- --write records after every step passed (src/preflight/probe.ts).
    await db.pool.query(
      "select bitrix_sync.record_crm_contract_probe('Portal.Example.Invalid', bitrix_sync.crm_contract_forms(), '0a1b2c3d')",
    );
    t.deepEqual((await ready(source(PROD))).body.problems, ["cutover_not_performed"]);
    const after = await statusBody(source(PROD));
    t.like(after.crm_contract, {
      confirmed: true,
      forms: { registered_write: "1", registered_filter: "1", date_filter: "offset", opened_filter: "Y" },
    });
    t.regex(String(after.crm_contract?.confirmed_at), /Z$/);

    // Another form in use than the one proved: unconfirmed again, until a probe proves it too.
    await setSettings(db, { "contract.registered_filter": "Y" });
    t.deepEqual((await ready(source(PROD))).body.problems, [
      "cutover_not_performed",
      "crm_contract_unconfirmed",
    ]);
    t.like((await statusBody(source(PROD))).crm_contract, {
      confirmed: false,
      forms: { registered_filter: "Y" },
    });
    t.truthy((await statusBody(source(PROD))).crm_contract?.last_pass_at, "the last pass, with other forms");
    await setSettings(db, { "contract.registered_filter": "1" });
    t.deepEqual((await ready(source(PROD))).body.problems, ["cutover_not_performed"]);

    // Malformed records are refused with BS004, nothing written.
    for (const args of [
      [
        "https://portal.example.invalid/",
        '{"registered_write":"1","registered_filter":"1","date_filter":"offset","opened_filter":"Y"}',
        "0a1b2c3d",
      ],
      ["portal.example.invalid", '{"registered_write":"1"}', "0a1b2c3d"],
      [
        "portal.example.invalid",
        '{"registered_write":"1","registered_filter":"1","date_filter":"offset","opened_filter":"Y"}',
        "not hex",
      ],
    ]) {
      const e = await t.throwsAsync(
        db.pool.query("select bitrix_sync.record_crm_contract_probe($1, $2, $3)", args),
      );
      t.is((e as { code?: string }).code, "BS004");
    }
    const { rows } = await db.pool.query("select count(*)::int as n from bitrix_sync.crm_contract_probes");
    t.is(rows[0]?.n, 1);
  },
);

test.serial(
  "processing without a cutover is degraded (the receivers stay reachable); after the cutover it is ready",
  async (t) => {
    const r = await ready(source(PROD));
    t.is(r.code, 200);
    t.is(r.body.status, "degraded");
    t.deepEqual(r.body.problems, ["cutover_not_performed"]);
    // Sandbox mode performs the cutover at start; if that failed, readiness shows it too.
    t.deepEqual((await ready(source({}))).body.problems, ["cutover_not_performed"]);
    t.deepEqual(
      (await ready(source({ BITRIX_SYNC_ENABLED: "false" }))).body.problems,
      [],
      "paused: nothing to wait for",
    );
    await db.pool.query("select * from bitrix_sync.perform_cutover('test')");
    t.deepEqual((await ready(source(PROD))).body, { status: "ready", problems: [] });
  },
);

test.serial(
  "readiness and the status document name the build: package.json's version and the checkout's commit",
  async (t) => {
    const pkg = JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { version: string };
    // Neither BITRIX_SYNC_VERSION nor BITRIX_SYNC_REVISION is set here: the checkout decides.
    t.is(SERVICE_VERSION, pkg.version);
    t.is(SERVICE_REVISION, gitRevision() ?? "unknown");
    const app = createApp({ pool: db.pool, log, status: source(PROD) });
    const ready = (await (await app.request("/health/ready")).json()) as { build: unknown };
    t.deepEqual(ready.build, { version: pkg.version, revision: SERVICE_REVISION });
    const doc = (await (
      await app.request("/internal/sync/v1/status", { headers: { authorization: `Bearer ${TOKEN}` } })
    ).json()) as { build: unknown; pause: unknown };
    t.deepEqual(doc.build, ready.build);
    t.is(doc.pause, null, "nothing paused");
  },
);

test.serial(
  "readiness, the status document and the metric name this release's schema and the database's (the compatibility window)",
  async (t) => {
    const own = releaseSchema().number;
    const src = source(PROD);
    const app = createApp({ pool: db.pool, log, status: src });
    const ready = (await (await app.request("/health/ready")).json()) as { schema: unknown };
    t.deepEqual(ready.schema, { release: own, database: own, contract_floor: null, in_window: true });
    const doc = (await (
      await app.request("/internal/sync/v1/status", { headers: { authorization: `Bearer ${TOKEN}` } })
    ).json()) as { schema: unknown };
    t.deepEqual(doc.schema, ready.schema);
    const metrics = await (await app.request("/metrics")).text();
    t.regex(
      metrics,
      new RegExp(`^bitrix_sync_schema_info\\{schema="${own}",release_schema="${own}"\\} 1$`, "m"),
    );
  },
);

test.serial(
  "a contract step past this release's schema: not ready (schema_outside_window), out of the window everywhere",
  async (t) => {
    // Its own database: a contract step is never deleted (sql/compatibility/window.sql).
    const other = await createTestDb();
    t.teardown(() => other.drop());
    const own = releaseSchema().number;
    const src = source(PROD);
    const app = createApp({ pool: other.pool, log, status: src });
    const before = await app.request("/health/ready");
    t.is(before.status, 200);
    // A newer release's migration dropped what releases before 999998 use.
    await other.pool.query(
      `insert into bitrix_sync.schema_contract_steps (migration, oldest_release_schema, what)
       values ('999999', '999998', 'drops what releases before 999998 read (a test)')`,
    );
    await new Promise((r) => setTimeout(r, 1_100)); // readiness serves its last answer for 1 s
    const res = await app.request("/health/ready");
    const body = (await res.json()) as { status: string; problems: string[]; schema: unknown };
    t.is(res.status, 503);
    t.is(body.status, "not_ready");
    t.true(body.problems.includes("schema_outside_window"), body.problems.join(", "));
    t.deepEqual(body.schema, { release: own, database: own, contract_floor: "999998", in_window: false });
    const metrics = await (await app.request("/metrics")).text();
    t.regex(metrics, /^bitrix_sync_readiness_problem\{problem="schema_outside_window"\} 1$/m);
    await t.throwsAsync(
      other.pool.query("delete from bitrix_sync.schema_contract_steps"),
      { message: /are history and are never deleted/ },
      "a contract step is kept",
    );
  },
);

test.serial(
  "a pause is degraded (paused), with who and why in the status document; a resume clears it",
  async (t) => {
    const src = source(PROD);
    const app = createApp({ pool: db.pool, log, status: src });
    await db.pool.query("select * from bitrix_sync.pause_sync('ops:status', 'checking the rollback')");
    try {
      const r = await ready(src);
      t.is(r.code, 200);
      t.deepEqual(r.body, { status: "degraded", problems: ["paused"] });
      // A replica that claims nothing anyway (BITRIX_SYNC_ENABLED=false) has nothing to report.
      t.deepEqual((await ready(source({ ...PROD, BITRIX_SYNC_ENABLED: "false" }))).body.problems, []);
      const doc = (await (
        await app.request("/internal/sync/v1/status", { headers: { authorization: `Bearer ${TOKEN}` } })
      ).json()) as { pause: Record<string, unknown> };
      t.like(doc.pause, {
        by: "ops:status",
        db_user: "postgres",
        reason: "checking the rollback",
        drained: true,
      });
      t.true(Number(doc.pause.paused_for_sec) >= 0);
    } finally {
      const { rows } = await db.pool.query("select pause_id from bitrix_sync.status_pause");
      await db.pool.query("select * from bitrix_sync.resume_sync('ops:status', $1, 'done checking')", [
        rows[0]?.pause_id,
      ]);
    }
    t.deepEqual((await ready(src)).body, { status: "ready", problems: [] });
  },
);

test.serial("live answers without touching the database; ready checks migrations and grants", async (t) => {
  const app = createApp({ pool: db.pool, log });
  t.is((await app.request("/health/live")).status, 200);
  t.deepEqual(await ready(), { code: 200, body: { status: "ready", problems: [] } });
  t.deepEqual(await ready(source({})), { code: 200, body: { status: "ready", problems: [] } });
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

    // health.crm_stale_sec (default 300 s): two minutes without a success is not stale yet.
    h.lastCrmSuccessAt = Date.now() - 120_000;
    h.noteCrm({ type: "network", sent: false, code: "ECONNREFUSED", elapsedMs: 5 });
    t.deepEqual((await ready(s2)).body, { status: "ready", problems: [] });
    h.lastCrmSuccessAt = Date.now() - 300_000 - 1000;
    const d = await ready(s2);
    t.is(d.code, 200);
    t.deepEqual(d.body, { status: "degraded", problems: ["crm_stale"] });
    // A shorter threshold in the hot settings applies to the same history.
    h.lastCrmSuccessAt = Date.now() - 120_000;
    const shorter = source(PROD, h, { "health.crm_stale_sec": 60 });
    t.deepEqual((await ready(shorter)).body, { status: "degraded", problems: ["crm_stale"] });
  },
);

test.serial(
  "a replica whose own loop stands still is not stalled while another replica runs the sync loop",
  async (t) => {
    const h = new HealthState();
    const src = source(PROD, h);
    h.loopBeatAt = Date.now() - WORKER_STALL_MS - 1000;
    t.deepEqual((await ready(src)).body.problems, ["worker_stalled"], "no loop anywhere: stalled");
    // The deployment's one sync_loop job, taken a moment ago by another replica's worker.
    await db.pool.query("select graphile_worker.add_job('sync_loop', '{}'::json, job_key := 'sync_loop')");
    await db.pool.query(
      `update graphile_worker._private_jobs set locked_at = now(), locked_by = 'another-replica'
        where task_id = (select id from graphile_worker._private_tasks where identifier = 'sync_loop')`,
    );
    try {
      t.deepEqual((await ready(src)).body, { status: "ready", problems: [] });
      // A loop job taken longer ago than the stall bound runs nowhere any more.
      await db.pool.query(
        `update graphile_worker._private_jobs set locked_at = now() - interval '10 minutes'
          where task_id = (select id from graphile_worker._private_tasks where identifier = 'sync_loop')`,
      );
      t.deepEqual((await ready(src)).body.problems, ["worker_stalled"]);
    } finally {
      await db.pool.query(
        `delete from graphile_worker._private_jobs
          where task_id = (select id from graphile_worker._private_tasks where identifier = 'sync_loop')`,
      );
    }
  },
);

test.serial(
  "a sub-command refused for rights inside an HTTP-200 batch is not-ready until that method succeeds",
  async (t) => {
    // The three forms a refusal for rights takes inside result_error (reference §1, §3).
    for (const entry of [
      { error: "ACCESS_DENIED", error_description: "Access denied" },
      { error: "insufficient_scope", error_description: "The request requires higher privileges" },
      { error: "", error_description: "Access denied" },
    ]) {
      const h = new HealthState();
      const src = source(PROD, h);
      h.noteCrm({ type: "reply", status: 200, body: {}, elapsedMs: 5 });
      const code = classify({ type: "command_error", entry }, { write: true }).code;
      h.noteCommands([
        { method: "crm.item.add", ok: false, code },
        { method: "crm.contact.list", ok: true, code: null },
      ]);
      const r = await ready(src);
      t.is(r.code, 503, `${entry.error || entry.error_description}`);
      t.deepEqual(r.body.problems, ["crm_permission_denied"]);
      h.noteCommands([{ method: "crm.contact.list", ok: true, code: null }]);
      h.noteCrm({ type: "reply", status: 200, body: {}, elapsedMs: 5 });
      t.is((await ready(src)).code, 503, "a success of another method does not clear it");
      h.noteCommands([{ method: "crm.item.add", ok: false, code: "server_error" }]);
      t.is((await ready(src)).code, 503, "nor does another kind of failure of the same method");
      h.noteCommands([{ method: "crm.item.add", ok: true, code: null }]);
      t.deepEqual((await ready(src)).body, { status: "ready", problems: [] }, "a later success of it does");
    }
  },
);

test.serial("alerts configured but unusable make readiness degraded with alert_config_invalid", async (t) => {
  // Not configured at all: nothing to report (the alert receiver answers receiver_not_configured).
  t.deepEqual((await ready(source(PROD))).body, { status: "ready", problems: [] });
  for (const raw of ["3000000000", "1036.5"]) {
    const restore = await forceActiveSettingValue(db.pool, "alerts.entity_type_id", raw);
    try {
      const r = await ready(source(PROD));
      t.is(r.code, 200, raw);
      t.deepEqual(r.body, { status: "degraded", problems: ["alert_config_invalid"] }, raw);
    } finally {
      await restore();
    }
  }
  // A usable entity type with another alerts.* value past today's bounds.
  await setSettings(db, { ...DEFAULT_ALERT_SETTINGS, "alerts.entity_type_id": 1036 });
  const restore = await forceActiveSettingValue(db.pool, "alerts.responsible_id", "4294967296");
  try {
    t.deepEqual((await ready(source(PROD))).body.problems, ["alert_config_invalid"]);
  } finally {
    await restore();
    await setSettings(db, { "alerts.entity_type_id": null });
  }
  t.deepEqual((await ready(source(PROD))).body, { status: "ready", problems: [] });
});

test.serial("status needs the service token and holds no PII, IDs or secrets", async (t) => {
  const u = await makeUser(db.pool, { fullName: "Secret Name" });
  await db.pool.query(
    "select bitrix_sync.raise_business_alert('duplicate_contacts', 'low', repeat('a', 64), $1, '777001', null, '[\"777002\"]', '{}', null)",
    [u.id],
  );
  // A link made by phone alone whose fields are held back (mapping.hold_after_phone_link).
  await setSettings(db, { "mapping.hold_after_phone_link": true });
  await db.pool.query("select bitrix_sync.open_mapping($1, '777003', null)", [u.id]);
  await db.pool.query("select bitrix_sync.hold_phone_link($1, '777003')", [u.id]);
  await setSettings(db, { "mapping.hold_after_phone_link": false });
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
  t.is(body.held_links.count, 1);
  t.true(body.held_links.oldest_age_sec >= 0);
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
  t.regex(text, /bitrix_sync_business_alerts_open\{alert_type="duplicate_contacts",severity="low"\} 1/);
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
      t.deepEqual(await ready.json(), {
        status: "not_ready",
        problems: ["database_unreachable"],
        build: { version: SERVICE_VERSION, revision: SERVICE_REVISION },
        // Nothing read yet: this release's schema, the database's unknown.
        schema: { release: releaseSchema().number, database: null, contract_floor: null, in_window: null },
      });
      t.deepEqual(body.build, { version: SERVICE_VERSION, revision: SERVICE_REVISION });

      const metrics = await app.request("/metrics");
      t.is(metrics.status, 200);
      t.regex(await metrics.text(), /^bitrix_sync_metrics_database_up 0$/m);
    } finally {
      await down.end();
    }
  },
);
