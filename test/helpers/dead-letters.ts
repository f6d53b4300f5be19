// Named builders for technical dead letters of each source, made through the same SQL functions the
// service uses (dead_letter_sync_task, dead_letter_webhook, dead_letter_command, the workflow's
// fail event), plus the one way the tests call an admin function: as a role, committed.
import { randomBytes, randomUUID } from "node:crypto";
import type pg from "pg";
import { inFlightCommand } from "./builders.js";
import { makeUser } from "./factories.js";
import { asRole, type ProjectRole } from "./roles.js";
import { forceRow, one } from "./sql-core.js";

/** A row of bitrix_sync.technical_dead_letters. */
export interface DeadLetterRow {
  id: string;
  source: string;
  source_id: string;
  workflow_id: string | null;
  command_id: string | null;
  operation: string;
  error_code: string;
  resolved_at: Date | null;
  resolved_by: string | null;
  resolution: string | null;
  resolution_reason: string | null;
  requeued_to: string | null;
}

const inAMinute = () => new Date(Date.now() + 60_000);

/** Runs one statement as `role` in its own committed transaction (../helpers/roles.ts, asRole). */
export async function queryAsRole<T extends pg.QueryResultRow>(
  pool: pg.Pool,
  role: string,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  return await asRole(pool, role as ProjectRole, async (c) => (await c.query<T>(sql, params)).rows);
}

/** The dead letter written for a source row (the newest one). */
export function deadLetterOf(pool: pg.Pool, source: string, sourceId: string): Promise<DeadLetterRow> {
  return one<DeadLetterRow>(
    pool,
    "select * from bitrix_sync.technical_dead_letters where source = $1 and source_id = $2 order by id desc limit 1",
    [source, sourceId],
  );
}

/** A new user's map_or_create intent, leased and dead-lettered by intake (a technical failure). */
export async function deadLetteredIntent(pool: pg.Pool) {
  const user = await makeUser(pool);
  const q = await one<{ id: string }>(
    pool,
    "select id from han_app.sync_queue where entity_id = $1 and status = 'pending'",
    [user.id],
  );
  const token = randomUUID();
  await forceRow(pool, "han_app.sync_queue", q.id, {
    status: "leased",
    lease_token: token,
    locked_by: "intake",
    locked_until: inAMinute(),
  });
  await pool.query("select bitrix_sync.dead_letter_sync_task($1, $2, 'intake_failed')", [q.id, token]);
  return { user, queueId: q.id, dl: await deadLetterOf(pool, "sync_queue", q.id) };
}

/** A Contact webhook taken by the processor and dead-lettered. */
export async function deadLetteredWebhook(
  pool: pg.Pool,
  contactId = String(700_000 + Math.floor(Math.random() * 99_999)),
) {
  const { id } = await one<{ id: string }>(
    pool,
    "select bitrix_sync.record_webhook('contact', 3, $1, '127.0.0.1') as id",
    [contactId],
  );
  const token = randomUUID();
  await forceRow(pool, "bitrix_sync.webhook_inbox", id, {
    status: "processing",
    lease_token: token,
    locked_by: "webhooks",
    locked_until: inAMinute(),
  });
  await pool.query("select bitrix_sync.dead_letter_webhook($1, $2, 'crm_rejected')", [id, token]);
  return { inboxId: id, contactId, dl: await deadLetterOf(pool, "webhook", id) };
}

/**
 * A workflow's command dead-lettered for good (permission_denied); the workflow woke up and, unless
 * `fail` is false, failed on it as a step does.
 */
export async function workflowFailedByCommand(pool: pg.Pool, opts: { fail?: boolean } = {}) {
  const { cmd, token, wf } = await inFlightCommand(pool, { type: "contact.find_by_phone" });
  await pool.query(
    "select bitrix_sync.dead_letter_command($1, $2, 'permission_denied', 400, 'ACCESS_DENIED')",
    [cmd.id, token],
  );
  if (opts.fail !== false) {
    await pool.query(
      `select bitrix_sync.fire_workflow_event($1, null, 'fail', '{"last_error_code": "permission_denied", "outcome": "failed"}')`,
      [wf.id],
    );
  }
  return { workflowId: wf.id, commandId: cmd.id, dl: await deadLetterOf(pool, "crm_command", cmd.id) };
}

/** A business alert whose alert.update was dead-lettered (the mirror marked the alert failed). */
export async function alertWithDeadUpdate(pool: pg.Pool) {
  const alert = await one<{ id: string }>(
    pool,
    "select id from bitrix_sync.raise_business_alert('duplicate_contacts', 'low', $1, $2, '801', null, '[\"801\", \"802\"]', '{}', null)",
    [randomBytes(32).toString("hex"), randomUUID()],
  );
  await pool.query("select bitrix_sync.record_alert_item($1, 9001, 'DT1040_7:NEW')", [alert.id]);
  const cmd = await one<{ id: string }>(
    pool,
    `select id from bitrix_sync.issue_alert_command($1, 'alert.update', '{"entityTypeId": 1040, "id": 9001, "fields": {}}')`,
    [alert.id],
  );
  await pool.query("select bitrix_sync.mark_alert_mirrored($1)", [alert.id]);
  const token = randomUUID();
  await forceRow(pool, "bitrix_sync.crm_commands", cmd.id, {
    status: "in_flight",
    lease_token: token,
    locked_by: "pump",
    locked_until: inAMinute(),
    attempt_count: 1,
    sent_at: new Date(),
    first_sent_at: new Date(),
  });
  await pool.query(
    "select bitrix_sync.dead_letter_command($1, $2, 'invalid_argument', 400, 'INVALID_ARG_VALUE')",
    [cmd.id, token],
  );
  await pool.query("select bitrix_sync.mark_alert_mirror_failed($1)", [alert.id]);
  return { alertId: alert.id, commandId: cmd.id, dl: await deadLetterOf(pool, "crm_command", cmd.id) };
}
