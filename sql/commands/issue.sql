-- CRM commands (§7.2, §8, §9): issued by a workflow step (or the alert lane), pending until the
-- pump claims them; a finished command wakes its workflow.

create or replace function bitrix_sync._is_write_command(p_command_type text) returns boolean
language sql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;
comment on function bitrix_sync._is_write_command(text) is
  'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._is_write_command(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of claim_commands.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._wake_workflow(p_workflow_id uuid) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now(), updated_at = now()
   where id = p_workflow_id and state is not distinct from 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync._wake_workflow(uuid) is
  'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text,
  p_trace_context text default null, p_step_data jsonb default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  if p_step_data is not null and jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  -- running -> waiting_crm (event await_crm; the guard trigger checks the edge) under the caller's
  -- lease, with the step and its state in the same row version: one write of the workflow per step.
  update bitrix_sync.workflow_instances w
     set state = 'waiting_crm', current_step = coalesce(p_step, w.current_step),
         step_data = coalesce(p_step_data, w.step_data), next_attempt_at = now(),
         lease_token = null, locked_by = null, locked_until = null, updated_at = now()
   where w.id = p_workflow_id and w.state is not distinct from 'running' and w.lease_token = p_lease_token
  returning * into v_wf;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id, trace_context)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id,
          bitrix_sync._trace_context(p_trace_context))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text, jsonb) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm (await_crm) at step p_step, storing p_step_data (the step state, a JSON object) in the same write when given. The unique index allows one active command per workflow. p_trace_context is the issuing step''s W3C traceparent (malformed ones are ignored): every send of the command is traced under it. Refuses a stale lease or a workflow not running (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_cmd bitrix_sync.crm_commands;
begin
  if p_command_type not like 'alert.%' then
    raise exception 'alert commands must be alert.* types, got %', p_command_type
      using errcode = 'BS004', hint = 'Contact commands belong to a workflow: use issue_command().';
  end if;
  insert into bitrix_sync.crm_commands (alert_id, command_type, params)
  values (p_alert_id, p_command_type, coalesce(p_params, '{}'::jsonb))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_alert_command(bigint, text, jsonb) is
  'Queues a smart-process command for a business alert; independent of workflow steps (§7.1).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
