-- The privilege decisions (sql/privileges/) on the tables and sequences of commands/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.crm_commands',
   array['SELECT',
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits, reply_deadline_at, updated_at)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
