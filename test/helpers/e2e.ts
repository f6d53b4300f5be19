// End-to-end rig: a cloned test database, the Bitrix24 emulator over loopback HTTP, the real
// runtime (CRM client, PostgreSQL limiter) and a real graphile-worker runner with tasks/ and crontab.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { makeWorkerUtils } from "graphile-worker";
import pg from "pg";
import { loadConfig, SANDBOX_FIELDS } from "../../src/config/env.js";
import { withSearchPath } from "../../src/db/search-path.js";
import { createLogger } from "../../src/observability/logger.js";
import { buildRuntime, type Runtime, registerRuntime } from "../../src/runtime.js";
import { startRunner } from "../../src/worker/runner.js";
import { type Emulator, type EmulatorOptions, startEmulator } from "../../tools/emulator/server.js";
import { setSettings } from "./settings.js";
import { createTestDb, type TestDb } from "./testdb.js";

export interface Rig {
  db: TestDb;
  emulator: Emulator;
  runtime: Runtime;
  /** The service's connection string (bitrix_sync_user's with asRuntimeRole, else the superuser's). */
  serviceUrl: string;
  /** Every log line written, for PII/secret greps. */
  logs: string[];
  /** Starts the real graphile-worker runner and the sync loop (payload: e.g. a short budget_ms). */
  startWorker(loopPayload?: Record<string, unknown>): Promise<void>;
  /** Stops the runner (as SIGTERM would). */
  stopWorker(): Promise<void>;
  close(): Promise<void>;
}

export const TEST_MEMBER_ID = "test-member-0001";
// Test values that pass the service's token rules (src/config/tokens.ts): 32+ URL-safe characters,
// all different.
export const TEST_CONTACT_TOKEN = "contact-token-5f0b3c1e9a7d4b2c8e6f";
export const TEST_ALERT_TOKEN = "alert-token-8d2e4a6c0b9f1e3d5c7a";
export const TEST_SERVICE_TOKEN = "service-token-2c4e6a8b0d1f3e5c7a9b";
export const TEST_HASH_KEY = "hash-key-9e7c5a3b1d0f2e4c6a8b0d2f4e6c";

const secretDirs: string[] = [];
process.once("exit", () => {
  for (const d of secretDirs) rmSync(d, { recursive: true, force: true });
});

/**
 * The service's environment in tests: sync enabled against the emulator. Secrets are files in a
 * folder of their own, as in production (SECRETS_SOURCE=env is refused when sync is enabled);
 * `secrets` adds or replaces some (e.g. BITRIX_SYNC_DATABASE_URL for a child process).
 */
export function testServiceEnv(
  crm: { url: string; host: string },
  secrets: Record<string, string> = {},
): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-test-secrets-"));
  secretDirs.push(dir);
  const files: Record<string, string> = {
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: crm.url,
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: TEST_CONTACT_TOKEN,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: TEST_ALERT_TOKEN,
    BITRIX_SYNC_SERVICE_TOKEN: TEST_SERVICE_TOKEN,
    BITRIX_SYNC_HASH_KEY: TEST_HASH_KEY,
    ...secrets,
  };
  for (const [name, value] of Object.entries(files))
    writeFileSync(join(dir, name), `${value}\n`, { mode: 0o600 });
  return {
    SECRETS_SOURCE: "file",
    BITRIX_SYNC_SECRETS_DIR: dir,
    BITRIX_SYNC_ENABLED: "true",
    BITRIX_SYNC_PORTAL_HOST: crm.host,
    BITRIX_SYNC_PORTAL_MEMBER_ID: TEST_MEMBER_ID,
    BITRIX_SYNC_CONTACT_USER_ID_FIELD: SANDBOX_FIELDS.userId,
    BITRIX_SYNC_CONTACT_REGISTERED_FIELD: SANDBOX_FIELDS.registered,
    BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD: SANDBOX_FIELDS.citizenship,
    BITRIX_SYNC_HTTP_TIMEOUT_SEC: "2",
  };
}

export async function startRig(
  opts: {
    emulator?: Partial<EmulatorOptions>;
    settings?: Record<string, unknown>;
    /** Run the service as bitrix_sync_user (least privilege, §13) instead of the superuser. */
    asRuntimeRole?: boolean;
    /**
     * A database of the test's own instead of a fresh clone of the template (e.g. one whose App tables
     * another role owns); the rig drops it on close like its own.
     */
    db?: TestDb;
    /** Variables over the test service's environment (testServiceEnv). */
    env?: Record<string, string>;
    /** Perform the cutover on the new database (default true, as on every deployed service). */
    cutover?: boolean;
    /**
     * Record a passed write probe against the emulator with the forms in use (default true, as on
     * a deployment where `npm run preflight -- --write` passed): readiness is then not degraded by
     * crm_contract_unconfirmed. The probe itself is tested in test/integration/preflight/.
     */
    contractConfirmed?: boolean;
  } = {},
): Promise<Rig> {
  const db = opts.db ?? (await createTestDb({ cutover: opts.cutover ?? true }));
  await setSettings(db, {
    "worker.poll_interval_ms": 500,
    "batch.max_wait_ms": 50,
    "limiter.burst": 10,
    "limiter.refill_per_sec": 20,
    "lease.ttl_sec": 10,
    "retry.base_ms": 50,
    "retry.max_ms": 500,
    ...opts.settings,
  });
  const emulator = await startEmulator({ fields: SANDBOX_FIELDS, ...opts.emulator });
  if (opts.contractConfirmed ?? true) {
    await db.pool.query(
      "select bitrix_sync.record_crm_contract_probe($1, bitrix_sync.crm_contract_forms(), '00000000')",
      [emulator.host],
    );
  }
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      cb();
    },
  });
  const log = createLogger({ level: "debug", destination: sink });
  const config = loadConfig({ ...testServiceEnv(emulator), ...opts.env });
  let stopping = new AbortController();
  let servicePool = db.pool;
  let serviceUrl = db.url;
  if (opts.asRuntimeRole) {
    // Roles are cluster-wide; deployment grants LOGIN, the migrations create them NOLOGIN.
    const password = randomBytes(12).toString("hex");
    await db.pool.query(`alter role bitrix_sync_user login password '${password}'`);
    const u = new URL(db.url);
    u.username = "bitrix_sync_user";
    u.password = password;
    serviceUrl = u.toString();
    // With the service's session options (the search path, row_security off), as its pools have them.
    servicePool = new pg.Pool({ connectionString: withSearchPath(serviceUrl), max: 10 });
    servicePool.on("error", () => undefined);
    servicePool.on("connect", (client) => client.on("error", () => undefined));
  }
  const runtime = await buildRuntime({
    config,
    log,
    pool: servicePool,
    databaseUrl: serviceUrl,
    crmEndpoint: { webhookUrl: emulator.url, portalHost: emulator.host },
    stopping: stopping.signal,
  });
  registerRuntime(runtime);
  let runner: Awaited<ReturnType<typeof startRunner>> | null = null;
  const rig: Rig = {
    db,
    emulator,
    runtime,
    serviceUrl,
    logs,
    async startWorker(loopPayload = {}) {
      if (runner) return;
      stopping = new AbortController();
      runtime.stopping = stopping.signal;
      runner = await startRunner({ pool: servicePool, log, concurrency: 4 });
      const utils = await makeWorkerUtils({ pgPool: servicePool });
      try {
        await utils.addJob("sync_loop", loopPayload, { jobKey: "sync_loop", jobKeyMode: "replace" });
      } finally {
        await utils.release();
      }
    },
    async stopWorker() {
      stopping.abort();
      const r = runner;
      runner = null;
      await r?.stop();
    },
    async close() {
      await rig.stopWorker().catch(() => undefined);
      registerRuntime(null);
      await runtime.close().catch(() => undefined);
      await emulator.close().catch(() => undefined);
      if (servicePool !== db.pool) await servicePool.end().catch(() => undefined);
      await db.drop();
    },
  };
  return rig;
}

/**
 * Polls `probe` until it returns a truthy value or `timeoutMs` passes. The default leaves room for a
 * loaded machine (AVA runs four files at a time on two cores): a wait ends as soon as its condition
 * holds, so only a condition that never holds costs the whole of it.
 */
export async function waitFor<T>(
  probe: () => Promise<T | null | undefined | false>,
  timeoutMs = 30_000,
  what = "condition",
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits until the user's newest workflow has finished; returns it. */
export async function finishedWorkflow(rig: Rig, userId: string, timeoutMs = 30_000) {
  return await waitFor(
    async () => {
      const { rows } = await rig.db.pool.query(
        `select * from bitrix_sync.workflow_instances w where user_id = $1
            and not exists (select 1 from han_app.sync_queue q where q.entity_id = $1 and q.status in ('pending','leased','retry_wait'))
            and not exists (select 1 from han_app.sync_queue_journal j where j.user_id = $1)
          order by created_at desc limit 1`,
        [userId],
      );
      const w = rows[0];
      return w && ["succeeded", "failed", "waiting_manual"].includes(w.state) ? w : null;
    },
    timeoutMs,
    `workflow of ${userId}`,
  );
}
