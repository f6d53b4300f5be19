// The CRM client's public surface: what the workflow engine and the tasks call. One object per
// process holds the HTTP client, the shared limiter and the citizenship dictionary.
import { hostname } from "node:os";
import type pg from "pg";
import type { Settings } from "../settings-schema.js";
import { type CommandObservation, type CrmDeps, type CrmLog, executeBatch } from "./batch.js";
import { type CrmClient, createCrmClient } from "./client.js";
import {
  type CitizenshipDictionary,
  type CitizenshipDictionaryStatus,
  type CitizenshipList,
  type ContactFieldNames,
  type ContractForms,
  createCitizenshipDictionary,
} from "./contact-fields.js";
import { type CrmLimiter, createPgLimiter } from "./limiter.js";
import { CrmError } from "./redact.js";
import { tracedClient } from "./traced-client.js";

export * from "./backoff.js";
export * from "./batch.js";
export * from "./catalogue.js";
export * from "./classify.js";
export * from "./client.js";
export * from "./contact-fields.js";
export * from "./limiter.js";
export * from "./redact.js";

export interface CrmOptions {
  /** The webhook URL (a secret) and the approved portal host. */
  webhookUrl: string;
  portalHost: string;
  /** BITRIX_SYNC_HTTP_TIMEOUT_SEC in ms. */
  timeoutMs: number;
  /** Physical UF_CRM_<digits> names of the Contact fields (config.fields). */
  fields: ContactFieldNames;
  limiter: CrmLimiter;
  /** The current hot settings (the settings cache's `get`). */
  settings: () => Settings;
  /** Wraps the HTTP client once, e.g. to record every call's outcome for readiness. */
  observe?: (client: CrmClient) => CrmClient;
  /** Told each sub-command's outcome of every answered batch (e.g. a refusal for rights). */
  observeCommands?: (results: readonly CommandObservation[]) => void;
  /** Told the outcome of every read of the citizenship list (readiness, metrics, logs). */
  observeDictionary?: (status: CitizenshipDictionaryStatus) => void;
  log?: CrmLog;
}

/** The CRM client as the rest of the service uses it. */
export interface Crm {
  /** The HTTP client, already wrapped by `observe`. */
  readonly client: CrmClient;
  readonly limiter: CrmLimiter;
  /** What executeBatch needs: this client, the limiter and the field names. */
  readonly deps: CrmDeps;
  readonly citizenship: CitizenshipDictionary;
  /** Closes connections. */
  close(): Promise<void>;
}

/** Builds the CRM client. Throws CrmConfigError when the URL breaks §12.2/§16. */
export function createCrm(opts: CrmOptions): Crm {
  const raw = tracedClient(
    createCrmClient({
      webhookUrl: opts.webhookUrl,
      portalHost: opts.portalHost,
      timeoutMs: opts.timeoutMs,
    }),
  );
  const client = opts.observe ? opts.observe(raw) : raw;
  const deps: CrmDeps = {
    client,
    limiter: opts.limiter,
    timeoutMs: opts.timeoutMs,
    catalogue: {
      fields: opts.fields,
      // Read at every build: the settings are hot.
      get forms() {
        return contractForms(opts.settings());
      },
    },
    ...(opts.log ? { log: opts.log } : {}),
    ...(opts.observeCommands ? { observeCommands: opts.observeCommands } : {}),
  };
  const citizenship = createCitizenshipDictionary({
    // Read at every look: the setting is hot.
    ttlMs: () => opts.settings().citizenship.cacheTtlSec * 1000,
    load: () => loadCitizenship(deps),
    ...(opts.observeDictionary ? { onRead: opts.observeDictionary } : {}),
  });
  return {
    client,
    limiter: opts.limiter,
    deps,
    citizenship,
    close: () => client.close(),
  };
}

/** The contract forms the settings name (contract.*), as the catalogue's builders take them. */
export function contractForms(s: Settings): ContractForms {
  return {
    registeredWrite: s.contract.registeredWrite,
    registeredFilter: s.contract.registeredFilter,
    dateFilter: s.contract.dateFilter,
  };
}

/** The citizenship dictionary (§3.3): one batch of one command, under a limiter permit like any other. */
async function loadCitizenship(deps: CrmDeps): Promise<CitizenshipList> {
  const [o] = await executeBatch(deps, [{ type: "citizenship.list", params: {} }]);
  if (!o) throw new Error("citizenship.list returned no outcome");
  if (!o.ok) throw new CrmError(o.failure);
  return o.result as CitizenshipList;
}

/** The PostgreSQL limiter for one portal, with a slot lifetime derived from the HTTP timeout. */
export function createPortalLimiter(
  pool: pg.Pool,
  portalHost: string,
  timeoutMs: number,
  settings: () => Settings,
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
