// The services every capability runs with (App->CRM workflows, CRM->App inbound, business alerts):
// one per process, built by src/runtime.ts and handed to the lanes and tasks.
import type pg from "pg";
import type { CrmDeps } from "./crm/batch.js";
import type { CitizenshipDictionary } from "./crm/contact-fields.js";
import type { HealthState } from "./health/state.js";
import type { Logger } from "./observability/logger.js";
import type { Settings } from "./settings-schema.js";

/** The process's shared services: database pool, logger, CRM client, dictionary, hot settings. */
export interface ServiceContext {
  pool: pg.Pool;
  log: Logger;
  crm: CrmDeps;
  dictionary: CitizenshipDictionary;
  /** The hot settings in force (the settings cache's `get`). */
  settings: () => Settings;
  workerId: string;
  /** Heartbeat and CRM health for readiness (§14); optional in tests. */
  health?: HealthState;
}
