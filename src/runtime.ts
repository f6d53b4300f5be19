// The process-wide pieces graphile-worker tasks need (pool, CRM client, limiter, dictionary,
// settings). main.ts builds them once and registers them here; a task run by the graphile-worker
// CLI, where main.ts is not involved, builds them from the environment on first use.
import { hostname } from "node:os";
import pg from "pg";
import { type Config, loadConfig } from "./config/env.js";
import {
  type Crm,
  type CrmDeps,
  type CrmSettings,
  createCrm,
  createPortalLimiter,
  crmSettingsFrom,
} from "./crm/index.js";
import { HealthState, observedClient } from "./observability/health.js";
import { createLogger, type Logger } from "./observability/logger.js";
import { createSettingsCache, engineKeys, type SettingsCache } from "./settings-cache.js";
import { alertCrmSettingsFrom } from "./workflows/alert-sync.js";
import type { EngineDeps, EngineSettings } from "./workflows/engine.js";

export interface Runtime {
  config: Config;
  log: Logger;
  pool: pg.Pool;
  databaseUrl: string;
  settings: SettingsCache;
  crm: Crm;
  crmDeps: CrmDeps;
  engine: EngineDeps;
  health: HealthState;
  /** Aborted when the process begins to shut down: tasks stop claiming work. */
  stopping: AbortSignal;
  close(): Promise<void>;
}

export interface RuntimeInput {
  config: Config;
  log: Logger;
  pool: pg.Pool;
  databaseUrl: string;
  crmEndpoint: { webhookUrl: string; portalHost: string };
  stopping: AbortSignal;
}

export async function buildRuntime(input: RuntimeInput): Promise<Runtime> {
  const { config, log, pool } = input;
  const settings = await createSettingsCache(pool);
  // Parsed once per settings version (the cache hands out the same object until a refresh changes
  // it): these are read on every command and every limiter call.
  const crmSettings = perVersion(settings, crmSettingsFrom);
  const timeoutMs = config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC * 1000;
  const limiter = createPortalLimiter(pool, input.crmEndpoint.portalHost, timeoutMs, crmSettings);
  const crm = createCrm({
    webhookUrl: input.crmEndpoint.webhookUrl,
    portalHost: input.crmEndpoint.portalHost,
    timeoutMs,
    fields: {
      userId: config.fields.userId,
      registered: config.fields.registered,
      citizenship: config.fields.citizenship,
    },
    limiter,
    settings: crmSettings,
    log,
  });
  const health = new HealthState();
  const crmDeps: CrmDeps = {
    // Every call the engine makes is recorded for readiness and status (§14).
    client: observedClient(crm.client, health),
    limiter: crm.limiter,
    catalogue: {
      fields: {
        userId: config.fields.userId,
        registered: config.fields.registered,
        citizenship: config.fields.citizenship,
      },
    },
    log,
  };
  const engineSettings = perVersion(settings, (s): EngineSettings => {
    const c = crmSettingsFrom(s);
    const e = engineKeys(s);
    return {
      claimSize: e.claimSize,
      leaseSec: e.leaseSec,
      batchSize: c.batch.size,
      batchMaxWaitMs: c.batch.maxWaitMs,
      retry: c.retry,
    };
  });
  const engine: EngineDeps = {
    pool,
    log,
    crm: crmDeps,
    dictionary: crm.citizenship,
    settings: engineSettings,
    workerId: `${hostname()}:${process.pid}`,
    health,
  };
  return {
    ...input,
    settings,
    crm,
    crmDeps,
    engine,
    health,
    async close() {
      settings.stop();
      await crm.close();
    },
  };
}

/** `derive(settings.get())`, recomputed only when the cached settings object changes. */
function perVersion<T>(settings: SettingsCache, derive: (s: Record<string, unknown>) => T): () => T {
  let source: Record<string, unknown> | null = null;
  let value: T;
  return () => {
    const s = settings.get();
    if (s !== source) {
      value = derive(s);
      source = s;
    }
    return value;
  };
}

let registered: Promise<Runtime> | null = null;

/** main.ts (and tests) register the runtime they built. */
export function registerRuntime(r: Runtime | null): void {
  registered = r ? Promise.resolve(r) : null;
}

/** The runtime for a task: the registered one, or one built from the environment (CLI use). */
export function runtime(): Promise<Runtime> {
  registered ??= (async () => {
    const config = loadConfig();
    if (config.sandbox) {
      throw new Error(
        "the graphile-worker CLI needs BITRIX_SYNC_CRM_REST_WEBHOOK_URL: sandbox mode runs only under npm start",
      );
    }
    const databaseUrl = config.secrets.BITRIX_SYNC_DATABASE_URL;
    if (!databaseUrl) throw new Error("BITRIX_SYNC_DATABASE_URL is required");
    const log = createLogger({ level: config.env.LOG_LEVEL, environment: config.env.SERVICE_ENVIRONMENT });
    const pool = new pg.Pool({ connectionString: databaseUrl, max: config.env.BITRIX_SYNC_DB_POOL_SIZE });
    return await buildRuntime({
      config,
      log,
      pool,
      databaseUrl,
      crmEndpoint: {
        webhookUrl: config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL as string,
        portalHost: config.env.BITRIX_SYNC_PORTAL_HOST as string,
      },
      stopping: new AbortController().signal,
    });
  })();
  return registered;
}

/** Settings for the sync loop, read fresh each time. */
export function loopSettings(r: Runtime) {
  return {
    pollMs: () => engineKeys(r.settings.get()).pollMs,
    pumps: () => crmSettingsFrom(r.settings.get()).limiter.maxInFlight,
    alerts: () => alertCrmSettingsFrom(r.settings.get()),
  };
}
