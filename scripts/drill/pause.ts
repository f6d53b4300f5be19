// Pause and resume as a drill or a script runs them (sql/status/pause.sql; docs/operations.md, "Pause and
// resume"): the admin's functions, called as bitrix_sync_admin in a transaction of their own, as an
// operator's psql session would, plus the wait for the drain. `pool` is any pool whose login may
// `set role bitrix_sync_admin` (a drill's superuser, or an admin login).
import type pg from "pg";
import { waitUntil } from "./common.js";

/** The open pause as bitrix_sync.status_pause shows it (counts as numbers). */
export interface PauseState {
  pauseId: number;
  pausedAt: Date;
  pausedBy: string;
  reason: string;
  pausedForSec: number;
  inHand: {
    intentsLeased: number;
    workflowsRunning: number;
    commandsInHand: number;
    webhooksProcessing: number;
    requestsOut: number;
  };
  drained: boolean;
}

/** One row of resume_preview() (and of resume_sync()). */
export interface PreviewRow {
  section: string;
  item: string;
  count: number;
  oldestAgeSec: number | null;
  note: string | null;
}

async function asAdmin<T extends pg.QueryResultRow>(pool: pg.Pool, sql: string, params: unknown[] = []) {
  const c = await pool.connect();
  try {
    await c.query("begin");
    await c.query("set local role bitrix_sync_admin");
    const { rows } = await c.query<T>(sql, params);
    await c.query("commit");
    return rows;
  } catch (e) {
    await c.query("rollback").catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

interface StatusPauseRow {
  pause_id: string;
  paused_at: Date;
  paused_by: string;
  pause_reason: string;
  paused_for_sec: string;
  intents_leased: string;
  workflows_running: string;
  commands_in_hand: string;
  webhooks_processing: string;
  requests_out: string;
  drained: boolean;
}

function state(r: StatusPauseRow): PauseState {
  return {
    pauseId: Number(r.pause_id),
    pausedAt: r.paused_at,
    pausedBy: r.paused_by,
    reason: r.pause_reason,
    pausedForSec: Number(r.paused_for_sec),
    inHand: {
      intentsLeased: Number(r.intents_leased),
      workflowsRunning: Number(r.workflows_running),
      commandsInHand: Number(r.commands_in_hand),
      webhooksProcessing: Number(r.webhooks_processing),
      requestsOut: Number(r.requests_out),
    },
    drained: r.drained,
  };
}

/** pause_sync: every replica stops claiming within one poll interval. Throws BS070 when paused. */
export async function pauseSync(pool: pg.Pool, operator: string, reason: string): Promise<PauseState> {
  const [r] = await asAdmin<StatusPauseRow>(pool, "select * from bitrix_sync.pause_sync($1, $2)", [
    operator,
    reason,
  ]);
  if (!r) throw new Error("pause_sync returned no pause");
  return state(r);
}

/** The open pause, or null while processing runs. */
export async function pauseState(pool: pg.Pool): Promise<PauseState | null> {
  const [r] = await asAdmin<StatusPauseRow>(pool, "select * from bitrix_sync.status_pause");
  return r ? state(r) : null;
}

/** Waits until nothing claimed before the pause is still finishing; false when `boundMs` passed first. */
export function waitDrained(pool: pg.Pool, boundMs: number): Promise<boolean> {
  return waitUntil(async () => (await pauseState(pool))?.drained === true, boundMs);
}

interface PreviewDbRow {
  section: string;
  item: string;
  count: string;
  oldest_age_sec: string | null;
  note: string | null;
}

const preview = (rows: PreviewDbRow[]): PreviewRow[] =>
  rows.map((r) => ({
    section: r.section,
    item: r.item,
    count: Number(r.count),
    oldestAgeSec: r.oldest_age_sec === null ? null : Number(r.oldest_age_sec),
    note: r.note,
  }));

/** resume_preview(): what resuming releases, uncertain writes first. Read-only. */
export async function resumePreview(pool: pg.Pool): Promise<PreviewRow[]> {
  return preview(await asAdmin<PreviewDbRow>(pool, "select * from bitrix_sync.resume_preview()"));
}

/**
 * resume_sync for the open pause (`pauseId`, or the one open now): returns the summary as it stood;
 * from the commit the lanes are woken. Throws BS071 when not paused, BS072 for another pause's id.
 */
export async function resumeSync(
  pool: pg.Pool,
  operator: string,
  reason: string,
  pauseId?: number,
): Promise<PreviewRow[]> {
  const id = pauseId ?? (await pauseState(pool))?.pauseId ?? null;
  return preview(
    await asAdmin<PreviewDbRow>(pool, "select * from bitrix_sync.resume_sync($1, $2, $3)", [
      operator,
      id,
      reason,
    ]),
  );
}
