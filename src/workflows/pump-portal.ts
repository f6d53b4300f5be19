// The portal watch of the pump lane (docs/workflows.md, "Recovery after a portal outage"): what this
// process knows about the portal from its batches. A batch that fails as a whole with a portal-wide
// code (src/crm/classify.ts) marks the portal down; while nothing else is due the pump brings one
// waiting retry forward every PROBE_INTERVAL_MS as a probe, and the first answered batch brings every
// such retry forward (bring_forward_commands), to be claimed batch by batch through the limiter, and
// the inbox events whose read of the portal failed so (bring_forward_webhooks).
import type { ServiceContext } from "../context.js";
import type { CommandOutcome } from "../crm/batch.js";
import { isPortalWide, PORTAL_WIDE_CODES } from "../crm/classify.js";
import { safeError } from "../db/errors.js";

/** While the portal fails, one waiting retry is brought forward this often as a probe. */
export const PROBE_INTERVAL_MS = 3000;

/**
 * What this process knows about the portal. `down`: the last batch failed as a whole. `answered`:
 * some batch got a reply since the process started (until then a success also brings retries
 * forward once, in case the process started during an outage).
 */
interface PortalWatch {
  down: boolean;
  answered: boolean;
  lastProbeAt: number;
}
const watches = new WeakMap<object, PortalWatch>();

export function watchOf(deps: ServiceContext): PortalWatch {
  let w = watches.get(deps.crm);
  if (!w) {
    w = { down: false, answered: false, lastProbeAt: 0 };
    watches.set(deps.crm, w);
  }
  return w;
}

/**
 * Retries waiting for a portal-wide failure become due now (at most `limit` commands; null: every
 * command and workflow, and the inbox events whose read failed so: bring_forward_webhooks).
 */
export async function bringForward(deps: ServiceContext, limit: number | null): Promise<number> {
  const { rows } = await deps.pool.query<{ n: number }>(
    limit === null
      ? "select bitrix_sync.bring_forward_commands($1, null) + bitrix_sync.bring_forward_webhooks($1) as n"
      : "select bitrix_sync.bring_forward_commands($1, $2) as n",
    limit === null ? [PORTAL_WIDE_CODES] : [PORTAL_WIDE_CODES, limit],
  );
  return rows[0]?.n ?? 0;
}

/**
 * Keeps the portal's state for this process from a batch's outcomes. A batch that failed as a
 * whole with a portal-wide code marks it down (the pump then probes); the first reply after that
 * (or the first of the process) brings the retries waiting for such failures forward.
 */
export async function notePortal(deps: ServiceContext, outcomes: CommandOutcome[]): Promise<void> {
  const watch = watchOf(deps);
  // A reply about some command: a success, or a failure of that command rather than of the portal.
  // Commands held back before sending (a blocked method, bad data) say nothing about the portal.
  const answered = outcomes.some((o) => o?.ok || (o && !o.ok && o.sent && !isPortalWide(o.failure.code)));
  if (!answered) {
    if (outcomes.some((o) => o && !o.ok && o.sent)) watch.down = true;
    return;
  }
  if (watch.down || !watch.answered) {
    const wasDown = watch.down;
    watch.down = false;
    watch.answered = true;
    try {
      const n = await bringForward(deps, null);
      if (n > 0 || wasDown) {
        deps.log.info(
          { event: "pump.portal_recovered", broughtForward: n },
          "the portal answers again; waiting retries are due now",
        );
      }
    } catch (e) {
      watch.answered = false; // try again after the next reply
      deps.log.warn({ event: "pump.bring_forward_failed", ...safeError(e) }, "retries not brought forward");
    }
  }
}
