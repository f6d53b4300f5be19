-- CRM commands (§7.2): an uncertain command is reconciled by its workflow (the holder of its
-- lease), which resolves it as done, to be retried, or dead-lettered.

create or replace function bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state is not distinct from 'running' and w.lease_token = p_workflow_token
   for update of c;
  if not found then
    perform bitrix_sync._refuse_stale('workflow of command', p_command_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._workflow_holder(bigint, uuid) is
  'Internal: the command, locked, when the caller holds its workflow''s lease; otherwise BS001.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.begin_command_reconcile(bigint, uuid) is
  'uncertain -> reconcile: the workflow (holding its lease) starts the recovery search for an unanswered write.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.resolve_command_reconcile(
  p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb default null,
  p_error_code text default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  if v_row.status <> 'reconcile' then
    raise exception 'command % is %, not reconcile', p_id, v_row.status
      using errcode = 'BS002', hint = 'Call begin_command_reconcile() first.';
  end if;
  case p_outcome
    when 'succeeded' then
      update bitrix_sync.crm_commands
         set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null
       where id = p_id returning * into v_row;
    when 'retry' then
      -- The search proved the write did not land: sending it again cannot duplicate anything.
      perform bitrix_sync._check_code(coalesce(p_error_code, 'reconciled_not_applied'));
      if now() > bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)) then
        -- Past the horizon (§9) a write that keeps getting no reply is not sent again: without
        -- this, a portal that never answers would keep the workflow waiting for ever.
        update bitrix_sync.crm_commands
           set status = 'dead_letter', completed_at = now(), last_error_code = 'retry_horizon_exceeded'
         where id = p_id returning * into v_row;
        perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type,
          'retry_horizon_exceeded', v_row.attempt_count - v_row.limit_hits,
          bitrix_sync._command_first_attempt(v_row), v_row.workflow_id, v_row.id, v_row.correlation_id,
          null, null);
        return v_row;
      end if;
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'superseded' then
      -- The workflow decides from a fresh read instead (a rebind's clear of the previous Contact):
      -- not a technical failure, so no DLQ row.
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type, p_error_code,
        v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
        v_row.workflow_id, v_row.id, v_row.correlation_id, null, null);
    else
      raise exception 'reconcile outcome must be succeeded, retry, superseded or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied; dead_letter with retry_horizon_exceeded and a DLQ row instead once the command is past its horizon, so the caller must look at the returned status) or dead_letter (superseded: dead_letter without a DLQ row, the workflow reads again and decides). Fenced by the workflow lease.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.resolve_command_reconcile(bigint,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
