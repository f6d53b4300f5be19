-- Workflows (§7.1): persisted transitions by event name, the context a step starts from, and the
-- step's own data, each fenced by the lease token (sql/workflows/lease.sql).

create or replace function bitrix_sync.fire_workflow_event(
  p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb default '{}'::jsonb
) returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_to text;
  v_bad text;
begin
  select * into v_row from bitrix_sync.workflow_instances where id = p_id for update;
  if not found then
    raise exception 'workflow % does not exist', p_id
      using errcode = 'BS005', hint = 'Check the workflow id.';
  end if;
  if v_row.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  select e.to_state into v_to from bitrix_sync.state_edges e
   where e.machine = 'workflow' and e.from_state = v_row.state and e.event = p_event;
  if v_to is null then
    raise exception 'workflow event % is not allowed in state %', p_event, v_row.state
      using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
  end if;
  select string_agg(k, ', ') into v_bad from jsonb_object_keys(coalesce(p_changes, '{}'::jsonb)) k
   where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                   'processed_revision');
  if v_bad is not null then
    raise exception 'workflow event cannot change %', v_bad
      using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
  end if;
  if p_changes ? 'last_error_code' and p_changes ->> 'last_error_code' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'last_error_code');
  end if;
  if p_changes ? 'outcome' and p_changes ->> 'outcome' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'outcome');
  end if;

  update bitrix_sync.workflow_instances w
     set state = v_to,
         current_step = coalesce(p_changes ->> 'current_step', w.current_step),
         step_data = case when p_changes ? 'step_data' then p_changes -> 'step_data' else w.step_data end,
         contact_id = case when p_changes ? 'contact_id' then p_changes ->> 'contact_id' else w.contact_id end,
         outcome = case when p_changes ? 'outcome' then p_changes ->> 'outcome' else w.outcome end,
         last_error_code = case when p_changes ? 'last_error_code' then p_changes ->> 'last_error_code' else w.last_error_code end,
         next_attempt_at = coalesce((p_changes ->> 'next_attempt_at')::timestamptz,
                                    case when v_to = 'running' then w.next_attempt_at else now() end),
         processed_revision = coalesce((p_changes ->> 'processed_revision')::integer, w.processed_revision),
         -- The lease belongs to a worker stepping a running workflow; any other state releases it.
         lease_token = case when v_to = 'running' then w.lease_token end,
         locked_by = case when v_to = 'running' then w.locked_by end,
         locked_until = case when v_to = 'running' then w.locked_until end,
         finished_at = case when v_to in ('succeeded', 'failed', 'cancelled') then now() end,
         updated_at = now()
   where w.id = p_id
  returning * into v_row;
  if v_to in ('waiting_retry', 'running') then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fire_workflow_event(uuid, uuid, text, jsonb) is
  'Moves a workflow along the edge named p_event from its current state (bitrix_sync.state_edges), applying the allowed changes. The caller must present the current lease token (null when none is held); stale holders get BS001, illegal events BS002.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- step_context() was first a PL/pgSQL function with several OUT columns, one of them a row
-- (plpgsql_check refuses that composite OUT variable), then a SQL function, which PostgreSQL plans
-- anew on every call: PL/pgSQL returning one composite value keeps its plans for the session.
drop function if exists bitrix_sync.step_context(uuid);
drop type if exists bitrix_sync.step_context_t;
create type bitrix_sync.step_context_t as (
  revision integer, intent_type text, trace_context text, unresolved_write boolean,
  last_command bitrix_sync.crm_commands
);
comment on type bitrix_sync.step_context_t is
  'What step_context() returns: the locked workflow''s revision, intent and trace context, whether one of its writes is unresolved, and its last command (all fields null when none).';
create or replace function bitrix_sync.step_context(p_id uuid)
returns bitrix_sync.step_context_t
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_out bitrix_sync.step_context_t;
  v_last bitrix_sync.crm_commands;
begin
  -- The workflow's row is held from here to the step's commit: a join (start_or_join_workflow) that
  -- comes now waits for the step. Its revision, intent and trace context are read under that lock.
  select w.revision, w.intent_type, w.trace_context
    into v_out.revision, v_out.intent_type, v_out.trace_context
    from bitrix_sync.workflow_instances w where w.id = p_id for update;
  -- A statement of its own, so a snapshot taken after the lock was granted: whatever the holder it
  -- waited for committed is seen. The last command is the most recently changed one (after a
  -- recovery search, the re-sent create is newer than the search).
  select c.* into v_last from bitrix_sync.crm_commands c
   where c.workflow_id = p_id and c.alert_id is null
   order by c.updated_at desc, c.id desc limit 1;
  v_out.last_command := v_last;
  v_out.unresolved_write := exists (select 1 from bitrix_sync.crm_commands u
                                     where u.workflow_id = p_id and u.status in ('uncertain', 'reconcile'));
  return v_out;
end $$;
comment on function bitrix_sync.step_context(uuid) is
  'What a workflow step starts from, in one call inside the step''s transaction: locks the workflow row (FOR UPDATE) and returns its revision, intent and trace context, then, read after the lock, its last command (null fields when none) and whether one of its writes is unresolved (uncertain or reconcile). One row; revision is null when the workflow does not exist.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.step_context(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (the start of a step).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.save_workflow_step(
  p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text default null
) returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  if p_step_data is null or jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  if p_current_step is not null and p_current_step !~ '^[a-z][a-z0-9_]{0,63}$' then
    raise exception 'a step name is a snake_case identifier of at most 64 characters'
      using errcode = 'BS004', hint = 'Pass the planner''s step name, e.g. find_by_phone.';
  end if;
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  update bitrix_sync.workflow_instances
     set step_data = p_step_data, current_step = coalesce(p_current_step, current_step)
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.save_workflow_step(uuid, uuid, jsonb, text) is
  'Persists the step state (and, when given, the step name) of a running workflow without a state change. Fenced by the workflow''s lease token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
