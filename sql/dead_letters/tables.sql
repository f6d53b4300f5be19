-- The privilege decisions (sql/privileges/) on the tables and sequences of dead_letters/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
