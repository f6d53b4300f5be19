// The process-wide pieces graphile-worker tasks need (pool, CRM client, limiter, dictionary,
// settings). main.ts builds them once and registers them here; a task run by the graphile-worker
// CLI, where main.ts is not involved, builds them from the environment on first use.
import { hostname } from "node:os";
import type pg from "pg";
import { type Config, loadConfig } from "./config/env.js";
import type { ServiceContext } from "./context.js";
import { type Crm, type CrmDeps, createCrm, createPortalLimiter } from "./crm/index.js";
import { createPool } from "./db/pools.js";
import { configureHashKey } from "./hash.js";
import { dictionaryObserver } from "./health/dictionary.js";
import { HealthState, observedClient } from "./health/state.js";
import { createLogger, type Logger } from "./observability/logger.js";
import { createSettingsCache, type SettingsCache } from "./settings-cache.js";

export interface Runtime {
  config: Config;
  log: Logger;
  pool: pg.Pool;
  databaseUrl: string;
  settings: SettingsCache;
  crm: Crm;
  crmDeps: CrmDeps;
  /** The services every capability runs with (src/context.ts). */
  services: ServiceContext;
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
  // Hashes over personal data are keyed (src/hash.ts); with sync disabled the key may be absent.
  configureHashKey(config.secrets.BITRIX_SYNC_HASH_KEY);
  const settings = await createSettingsCache(pool, { log });
  const timeoutMs = config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC * 1000;
  const limiter = createPortalLimiter(pool, input.crmEndpoint.portalHost, timeoutMs, settings.get);
  const health = new HealthState();
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
    settings: settings.get,
    // Every call, the lanes' and the citizenship dictionary's, is recorded for readiness and
    // status (§14).
    observe: (client) => observedClient(client, health),
    // ... and every sub-command of an answered batch: a refusal for rights comes with HTTP 200.
    observeCommands: (results) => health.noteCommands(results),
    // ... and every read of the citizenship list: a missing field or an empty list is degraded.
    observeDictionary: dictionaryObserver({
      health,
      log,
      field: config.fields.citizenship,
      ttlSec: () => settings.get().citizenship.cacheTtlSec,
    }),
    log,
  });
  const crmDeps = crm.deps;
  const services: ServiceContext = {
    pool,
    log,
    crm: crmDeps,
    dictionary: crm.citizenship,
    settings: settings.get,
    workerId: `${hostname()}:${process.pid}`,
    health,
  };
  return {
    ...input,
    settings,
    crm,
    crmDeps,
    services,
    health,
    async close() {
      settings.stop();
      await crm.close();
    },
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
    const pool = createPool(databaseUrl, "work", { max: config.env.BITRIX_SYNC_DB_POOL_SIZE });
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
