// What the process says about the citizenship dictionary (§3.3) after each read of the portal's list:
// readiness (HealthState), a counter of reads by outcome, and one log line a person understands each
// time the condition changes (not one per read). The field's name is configuration, not a secret.
import type { CitizenshipDictionaryState, CitizenshipDictionaryStatus } from "../crm/contact-fields.js";
import type { Logger } from "../observability/logger.js";
import { dictionaryReads } from "../observability/metrics.js";
import type { HealthState } from "./state.js";

/** The observer createCrm's `observeDictionary` takes. */
export function dictionaryObserver(opts: {
  health: HealthState;
  log: Logger;
  /** Physical name of the citizenship field (BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD). */
  field: string;
  /** The cache's lifetime now (setting citizenship.cache_ttl_sec), for the log line. */
  ttlSec: () => number;
}): (s: CitizenshipDictionaryStatus) => void {
  let last: CitizenshipDictionaryState | "failed" = "unknown";
  return (s) => {
    opts.health.noteDictionary(s);
    dictionaryReads.inc({ outcome: s.outcome });
    if (s.outcome === last) return;
    last = s.outcome;
    const { field } = opts;
    const again = `it is read again in ${opts.ttlSec()} s (citizenship.cache_ttl_sec)`;
    switch (s.outcome) {
      case "field_missing":
        opts.log.warn(
          { event: "citizenship.dictionary_unusable", state: s.outcome, field },
          `the portal has no Contact field ${field} (BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD): Contacts are created without citizenship and Contact reads carry none until the field is back or the setting names the right one; ${again}`,
        );
        return;
      case "list_empty":
        opts.log.warn(
          { event: "citizenship.dictionary_unusable", state: s.outcome, field },
          `the portal's citizenship list (${field}) has no elements: Contacts are created without citizenship until a CRM admin fills it; ${again}`,
        );
        return;
      case "failed":
        opts.log.warn(
          {
            event: "citizenship.dictionary_read_failed",
            state: s.state,
            retry_in_ms: s.retryAt === undefined ? null : Math.max(0, s.retryAt - Date.now()),
          },
          s.state === "unavailable"
            ? "the citizenship list could not be read and none is cached: creates wait until a read succeeds"
            : "the citizenship list could not be read; the cached one stays in use",
        );
        return;
      case "ready":
        opts.log.info(
          { event: "citizenship.dictionary_ready", items: s.items },
          "the citizenship list was read and is in use",
        );
        return;
    }
  };
}
