// The CRM client's public surface: what the workflow engine and the tasks call. One object per
// process holds the HTTP client, the shared limiter, a batcher and the citizenship dictionary.
import { hostname } from "node:os";
import type pg from "pg";
import { type Batcher, type CommandOutcome, type CrmLog, createBatcher, executeBatch } from "./batch.js";
import type { CommandParams, CommandType, CrmCommand } from "./catalogue.js";
import { type CrmClient, createCrmClient } from "./client.js";
import {
  type CitizenshipDictionary,
  type ContactFieldNames,
  createCitizenshipDictionary,
} from "./contact-fields.js";
import { type CrmLimiter, createPgLimiter } from "./limiter.js";
import { CrmError } from "./redact.js";
import type { CrmSettings } from "./settings.js";

export * from "./backoff.js";
export * from "./batch.js";
export * from "./catalogue.js";
export * from "./classify.js";
export * from "./client.js";
export * from "./contact-fields.js";
export * from "./limiter.js";
export * from "./redact.js";
export * from "./settings.js";

export interface CrmOptions {
  /** The webhook URL (a secret) and the approved portal host. */
  webhookUrl: string;
  portalHost: string;
  /** BITRIX_SYNC_HTTP_TIMEOUT_SEC in ms. */
  timeoutMs: number;
  /** Physical UF_CRM_<digits> names of the Contact fields (config.fields). */
  fields: ContactFieldNames;
  limiter: CrmLimiter;
  /** Current hot settings; called on every flush, so a new settings version applies at once. */
  settings: () => CrmSettings;
  log?: CrmLog;
}

/** The CRM client as the rest of the service uses it. */
export interface Crm {
  readonly client: CrmClient;
  readonly limiter: CrmLimiter;
  readonly batcher: Batcher;
  readonly citizenship: CitizenshipDictionary;
  /** Queues one command into the shared batcher; resolves with its own outcome. */
  run<T extends CommandType>(type: T, params: CommandParams[T]): Promise<CommandOutcome<T>>;
  /** Sends up to 50 already-claimed commands as one batch, now (the crm_pump path). */
  sendBatch(commands: readonly CrmCommand[], opts?: { signal?: AbortSignal }): Promise<CommandOutcome[]>;
  /** Drains the batcher and closes connections. */
  close(): Promise<void>;
}

/** Builds the CRM client. Throws CrmConfigError when the URL breaks §12.2/§16. */
export function createCrm(opts: CrmOptions): Crm {
  const client = createCrmClient({
    webhookUrl: opts.webhookUrl,
    portalHost: opts.portalHost,
    timeoutMs: opts.timeoutMs,
  });
  const deps = {
    client,
    limiter: opts.limiter,
    catalogue: { fields: opts.fields },
    ...(opts.log ? { log: opts.log } : {}),
  };
  const batcher = createBatcher(deps, () => opts.settings().batch);
  const run = <T extends CommandType>(type: T, params: CommandParams[T]) =>
    batcher.submit({ type, params } as Extract<CrmCommand, { type: T }>) as Promise<CommandOutcome<T>>;
  const citizenship = createCitizenshipDictionary({
    ttlMs: opts.settings().citizenshipTtlMs,
    load: async () => {
      const o = await run("citizenship.list", {});
      if (!o.ok) throw new CrmError(o.failure);
      return o.result.items;
    },
  });
  return {
    client,
    limiter: opts.limiter,
    batcher,
    citizenship,
    run,
    sendBatch: (commands, o = {}) => executeBatch(deps, commands, o),
    async close() {
      await batcher.close();
      await client.close();
    },
  };
}

/** The PostgreSQL limiter for one portal, with a slot lifetime derived from the HTTP timeout. */
export function createPortalLimiter(
  pool: pg.Pool,
  portalHost: string,
  timeoutMs: number,
  settings: () => CrmSettings,
) {
  return createPgLimiter({
    pool,
    bucket: portalHost.toLowerCase(),
    holder: `${hostname()}:${process.pid}`.slice(0, 200),
    settings: () => settings().limiter,
    // A crashed holder's slot frees itself once its request certainly ended.
    slotTtlMs: timeoutMs + 5_000,
  });
}
