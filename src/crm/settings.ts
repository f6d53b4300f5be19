// The CRM client's hot settings (§12.3), read from bitrix_sync.active_settings() (a jsonb object
// keyed like "batch.size"). The database validates a version before it becomes active; parsing
// here still falls back to the documented default for a missing or unusable key, so a partial
// object (tests, an older settings version) works.
import { z } from "zod";
import { DEFAULT_RETRY_SETTINGS, type RetrySettings } from "./backoff.js";
import { type BatchSettings, DEFAULT_BATCH_SETTINGS } from "./batch.js";
import { DEFAULT_LIMITER_SETTINGS, type LimiterSettings } from "./limiter.js";

/** Everything the CRM client reads from settings, as plain values. */
export interface CrmSettings {
  batch: BatchSettings;
  limiter: LimiterSettings;
  retry: RetrySettings;
  /** citizenship.cache_ttl_sec in ms. */
  citizenshipTtlMs: number;
}

const int = (min: number, max: number, dflt: number) => z.coerce.number().int().min(min).max(max).catch(dflt);
const num = (min: number, max: number, dflt: number) => z.coerce.number().min(min).max(max).catch(dflt);

const Schema = z.object({
  "batch.size": int(1, 50, DEFAULT_BATCH_SETTINGS.size),
  "batch.max_wait_ms": int(0, 60_000, DEFAULT_BATCH_SETTINGS.maxWaitMs),
  "limiter.refill_per_sec": num(0.01, 50, DEFAULT_LIMITER_SETTINGS.refillPerSec),
  "limiter.burst": int(1, 250, DEFAULT_LIMITER_SETTINGS.burst),
  "limiter.max_in_flight": int(1, 50, DEFAULT_LIMITER_SETTINGS.maxInFlight),
  "retry.base_ms": int(1, 86_400_000, DEFAULT_RETRY_SETTINGS.baseMs),
  "retry.max_ms": int(1, 86_400_000, DEFAULT_RETRY_SETTINGS.maxMs),
  "retry.horizon_sec": int(1, 604_800, DEFAULT_RETRY_SETTINGS.horizonSec),
  "citizenship.cache_ttl_sec": int(1, 604_800, 3600),
});

/** Parses the active settings object (or any subset of it) into the CRM client's settings. */
export function crmSettingsFrom(active: unknown): CrmSettings {
  const obj = active !== null && typeof active === "object" && !Array.isArray(active) ? active : {};
  const s = Schema.parse(obj);
  return {
    batch: { size: s["batch.size"], maxWaitMs: s["batch.max_wait_ms"] },
    limiter: {
      refillPerSec: s["limiter.refill_per_sec"],
      burst: s["limiter.burst"],
      maxInFlight: s["limiter.max_in_flight"],
    },
    retry: { baseMs: s["retry.base_ms"], maxMs: s["retry.max_ms"], horizonSec: s["retry.horizon_sec"] },
    citizenshipTtlMs: s["citizenship.cache_ttl_sec"] * 1000,
  };
}

export const DEFAULT_CRM_SETTINGS: CrmSettings = crmSettingsFrom({});
