-- CRM commands (§7.2, §9): a failed command is retried within its horizon, dead-lettered, or
-- refused. A write with no reply becomes uncertain and is never resent blindly: its workflow
-- decides (src/workflows/decide/unanswered-write.ts) to search for a create, read again before a
-- non-idempotent write, or resend an idempotent one, each after the late execution could have landed
-- and after the command's backoff.

create or replace function bitrix_sync._check_bitrix_error(p_error text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  -- Bitrix24 error codes are identifiers (QUERY_LIMIT_EXCEEDED, ERROR_CORE, expired_token); the
  -- error_description next to them may quote field values, so only the identifier is kept (§9).
  if p_error is not null and p_error !~ '^[A-Za-z][A-Za-z0-9_]{0,63}$' then
    raise exception 'bitrix error must be the Bitrix24 error code (an identifier of at most 64 characters)'
      using errcode = 'BS004',
            hint = 'Pass the reply''s "error" field, e.g. QUERY_LIMIT_EXCEEDED, never error_description or raw text.';
  end if;
end $$;
comment on function bitrix_sync._check_bitrix_error(text) is
  'Refuses anything but a Bitrix24 error code identifier (null allowed), so raw reply text never reaches crm_commands or technical_dead_letters. SQLSTATE BS004.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._check_bitrix_error(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands)
returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- A command refused before it was ever sent has only its creation to count from.
  select coalesce(p_row.first_sent_at, p_row.created_at)
$$;
comment on function bitrix_sync._command_first_attempt(bitrix_sync.crm_commands) is
  'Internal: where a command''s retry horizon starts: its first send, or its creation if it was never sent.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._dead_letter_command_row(
  p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
  v_first timestamptz := bitrix_sync._command_first_attempt(p_row);
begin
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
         deadline_at = bitrix_sync._retry_deadline(v_first),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type, p_error_code,
    v_row.attempt_count - v_row.limit_hits, v_first, v_row.workflow_id, v_row.id, v_row.correlation_id,
    p_http_status, p_bitrix_error);
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands, text, integer, text) is
  'Internal: moves a held command to dead_letter, writes the technical DLQ row (first attempt and horizon) and wakes its workflow.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.retry_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean default true,
  p_http_status integer default null, p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- The horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
  end if;
  -- A command whose target may have changed meanwhile (the clear of a rebind's previous Contact,
  -- §5.4 step 4) is never resent as it is: it ends here, without a DLQ row, and its workflow waits
  -- (schedule_workflow_retry, the workflow's horizon) and reads the Contact again before a new one.
  if v_row.workflow_id is not null and (v_row.params ->> 'reread_before_retry') = 'true' then
    update bitrix_sync.crm_commands c
       set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
           last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
           deadline_at = v_deadline,
           response = jsonb_build_object('retry_by_workflow', true,
                                         'retry_at', now() + greatest(p_delay, interval '0')),
           limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
           lease_token = null, locked_by = null, locked_until = null
     where c.id = p_id
    returning * into v_row;
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
    return v_row;
  end if;
  update bitrix_sync.crm_commands c
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_http_status = p_http_status,
         last_bitrix_error = left(p_bitrix_error, 64), deadline_at = v_deadline,
         -- QUERY_LIMIT_EXCEEDED is refused before execution: it is not an attempt (§9).
         limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
         lease_token = null, locked_by = null, locked_until = null
   where c.id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_command(bigint, uuid, text, interval, boolean, integer, text) is
  'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). When the retry would fall past the horizon (first send + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. A workflow command with params.reread_before_retry is handed back instead: dead_letter with the error code, no DLQ row, response {retry_by_workflow, retry_at}, and its workflow wakes. The returned row says which. Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.retry_command(bigint,uuid,text,interval,boolean,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status is not distinct from 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.mark_command_uncertain(bigint, uuid, text) is
  'in_flight -> uncertain: the request left and no reply came. The workflow decides (decide/unanswered-write.ts): a create is searched for, a non-idempotent write read again, an idempotent one resent, never before a late execution could have landed and the backoff passed. Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.mark_command_uncertain(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.dead_letter_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer default null,
  p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return bitrix_sync._dead_letter_command_row(v_row, p_error_code, p_http_status, p_bitrix_error);
end $$;
comment on function bitrix_sync.dead_letter_command(bigint, uuid, text, integer, text) is
  'leased|in_flight -> dead_letter with a technical DLQ row (permanent failure). Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.reject_command(bigint, uuid, text) is
  'leased|in_flight -> dead_letter for a business failure (invalid phone, unknown citizenship): no technical DLQ row; the workflow wakes, parks in waiting_manual and raises a business alert (§9). Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.reject_command(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
