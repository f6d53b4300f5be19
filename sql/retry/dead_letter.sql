-- _dead_letter() is the one writer of technical_dead_letters rows (§9): every function that gives a
-- row up (a permanent failure, a retry past the horizon) calls it, with the row's first attempt; the
-- deadline it records is _retry_deadline() of that first attempt.

create or replace function bitrix_sync._dead_letter(
  p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer,
  p_first_attempt_at timestamptz, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid,
  p_http_status integer, p_bitrix_error text
) returns void
language sql set search_path = pg_catalog, pg_temp as $$
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values (p_source, p_source_id, p_workflow_id, p_command_id, p_operation, p_error_code, p_http_status,
          left(p_bitrix_error, 64), p_attempt_count, p_first_attempt_at,
          bitrix_sync._retry_deadline(p_first_attempt_at), p_correlation_id)
$$;
comment on function bitrix_sync._dead_letter(text, text, text, text, integer, timestamptz, uuid, bigint, uuid, integer, text) is
  'Internal: writes the technical DLQ row of a row given up (source and its id, operation, safe error code, attempts spent, first attempt; deadline = _retry_deadline(first attempt)). The one writer of technical_dead_letters rows.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._dead_letter(text,text,text,text,integer,timestamp with time zone,uuid,bigint,uuid,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the functions that give a row up: the one writer of technical_dead_letters rows.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
