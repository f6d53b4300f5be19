// Recovery of alert commands that got no answer (§11, §7.2; the rules are in sql/alert_mirror.sql).
// No workflow step waits for an alert command, so the alert lane does what a step does for a
// Contact write: an unanswered alert.update is sent again after the backoff, within its horizon; an
// unanswered alert.add is looked up by the alert's alert_number (or fingerprint) field before it is
// ever sent again, so one alert never gets two smart-process items. src/sync-loop.ts runs this with
// the mirror in the workflows lane.
import type pg from "pg";
import { attemptsSpent, backoffDelayMs } from "../crm/backoff.js";
import type { Logger } from "../observability/logger.js";
import type { Settings } from "../settings-schema.js";
import { type AlertSettings, alertTitle, mirrorsToCrm } from "./mirror.js";

/**
 * The field and value an alert's item is found by: its alert_number field (unique per alert), else
 * its fingerprint field (resolve_alert_lookup skips items other alerts own), else the title every
 * item gets, which carries the alert number.
 */
export function lookupMatch(
  a: { alert_number: string | number; alert_type: string; fingerprint: string },
  s: AlertSettings,
): { field: string; value: string | number } {
  // A value that is not a smart-process user field name is skipped, as the mirror skips it.
  const field = (f: string | undefined) => (f !== undefined && /^ufCrm\d*_\w+$/.test(f) ? f : null);
  const byNumber = field(s.fields.alert_number);
  if (byNumber) return { field: byNumber, value: Number(a.alert_number) };
  const byFingerprint = field(s.fields.fingerprint);
  if (byFingerprint) return { field: byFingerprint, value: a.fingerprint };
  return { field: "title", value: alertTitle(a) };
}

const ALERT_TYPES = ["alert.add", "alert.get", "alert.list", "alert.update"];

/**
 * One round: unanswered alert commands move on (an update to its retry, an add to reconcile), and
 * every alert whose item must be looked up gets its lookup. Returns how many it moved.
 */
export async function runAlertRecovery(
  pool: pg.Pool,
  s: Pick<Settings, "alerts" | "retry">,
  log: Logger,
  limit = 20,
): Promise<number> {
  if (!mirrorsToCrm(s.alerts)) return 0;
  let moved = 0;
  const { rows: unanswered } = await pool.query<{ id: string; attempt_count: number; limit_hits: number }>(
    `select id, attempt_count, limit_hits from bitrix_sync.crm_commands
      where command_type = any($1) and status = 'uncertain'
      order by id limit $2`,
    [ALERT_TYPES, limit],
  );
  for (const c of unanswered) {
    const delayMs = backoffDelayMs(attemptsSpent(c), s.retry);
    const { rows } = await pool.query<{ status: string | null; command_type: string | null }>(
      "select status, command_type from bitrix_sync.recover_alert_command($1, make_interval(secs => $2))",
      [c.id, delayMs / 1000],
    );
    if (rows[0]?.status === "dead_letter") {
      log.error(
        { event: "alert.mirror_dead_letter", commandId: c.id, code: "retry_horizon_exceeded" },
        "an unanswered alert command was given up after the retry horizon",
      );
    }
    if (rows[0]?.status) moved++;
  }
  const { rows: due } = await pool.query<{
    alert_id: string;
    alert_number: string;
    alert_type: string;
    fingerprint: string;
  }>("select alert_id, alert_number, alert_type, fingerprint from bitrix_sync.alerts_to_look_up($1)", [
    limit,
  ]);
  for (const a of due) {
    const match = lookupMatch(a, s.alerts);
    await pool.query("select bitrix_sync.issue_alert_lookup($1, $2)", [
      a.alert_id,
      JSON.stringify({ entityTypeId: s.alerts.entityTypeId, purpose: "find", match }),
    ]);
    moved++;
  }
  return moved;
}
