// What the demo reads back from the database to show each step: the user's workflow (branch,
// outcome), the active mapping, the robot webhook's inbox row and the App profile.
import type pg from "pg";
import { within } from "./wait.js";

export interface FinishedWorkflow {
  state: string;
  outcome: string | null;
  branch: string | null;
  contactId: number | null;
  others: number[];
}

const TERMINAL = ["succeeded", "failed", "cancelled", "waiting_manual"];

/** Waits until the user's intent has been taken up and its workflow has finished. */
export async function finishedWorkflow(
  pool: pg.Pool,
  userId: string,
  who: string,
  timeoutMs: number,
): Promise<FinishedWorkflow> {
  return await within(
    timeoutMs,
    `${who}'s Contact mapping`,
    async () => {
      const { rows } = await pool.query<{
        state: string;
        outcome: string | null;
        branch: string | null;
        contact_id: string | null;
        others: number[] | null;
      }>(
        `select w.state, w.outcome, w.step_data ->> 'branch' as branch, w.contact_id,
                (select array_agg(x::bigint) from jsonb_array_elements_text(coalesce(w.step_data -> 'others', '[]')) x) as others
           from bitrix_sync.workflow_instances w
          where w.user_id = $1
            and not exists (select 1 from han_app.sync_queue q
                             where q.entity_id = $1 and q.status in ('pending', 'leased', 'retry_wait'))
            and not exists (select 1 from han_app.sync_queue_journal j where j.user_id = $1)
          order by w.created_at desc limit 1`,
        [userId],
      );
      const w = rows[0];
      if (!w || !TERMINAL.includes(w.state)) return null;
      return {
        state: w.state,
        outcome: w.outcome,
        branch: w.branch,
        contactId: w.contact_id === null ? null : Number(w.contact_id),
        others: (w.others ?? []).map(Number),
      };
    },
    async () => {
      const { rows } = await pool.query<{ state: string; current_step: string }>(
        "select state, current_step from bitrix_sync.workflow_instances where user_id = $1 order by created_at desc limit 1",
        [userId],
      );
      const w = rows[0];
      return w ? `its workflow is ${w.state} at step ${w.current_step}` : "no workflow was started yet";
    },
  );
}

/** The Contact ID of the user's active mapping, or null. */
export async function mappedContact(pool: pg.Pool, userId: string): Promise<number | null> {
  const { rows } = await pool.query<{ external_id: string }>(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [userId],
  );
  return rows[0] ? Number(rows[0].external_id) : null;
}

/** Waits until no inbox row of the Contact's robot webhooks is pending; returns the last outcome. */
export async function webhookProcessed(pool: pg.Pool, contactId: number, timeoutMs: number): Promise<string> {
  return await within(
    timeoutMs,
    "the processing of the robot webhook",
    async () => {
      const { rows } = await pool.query<{ status: string; outcome: string | null }>(
        "select status, outcome from bitrix_sync.webhook_inbox where receiver = 'contact' and entity_id = $1 order by id",
        [String(contactId)],
      );
      const pending = ["received", "processing", "retry_wait"];
      if (rows.length === 0 || rows.some((r) => pending.includes(r.status))) return null;
      const last = rows.filter((r) => r.status === "processed" || r.status === "dead_letter").at(-1);
      return last?.status === "processed" ? (last.outcome ?? "none") : (last?.status ?? "none");
    },
    async () => {
      const { rows } = await pool.query<{ status: string }>(
        "select status from bitrix_sync.webhook_inbox where receiver = 'contact' and entity_id = $1 order by id desc limit 1",
        [String(contactId)],
      );
      return rows[0] ? `the inbox row is ${rows[0].status}` : "no inbox row";
    },
  );
}

export interface Profile {
  fullName: string | null;
  email: string | null;
}

export async function profileOf(pool: pg.Pool, userId: string): Promise<Profile | null> {
  const { rows } = await pool.query<{ full_name: string | null; email: string | null }>(
    "select full_name, email from han_app.client_profile where user_id = $1",
    [userId],
  );
  return rows[0] ? { fullName: rows[0].full_name, email: rows[0].email } : null;
}

/** Open business alerts of one type about the user. */
export async function openAlerts(pool: pg.Pool, userId: string, type: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    "select count(*)::int as n from bitrix_sync.business_alerts where user_id = $1 and alert_type = $2 and status = 'open'",
    [userId, type],
  );
  return rows[0]?.n ?? 0;
}
