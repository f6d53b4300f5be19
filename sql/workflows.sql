-- Workflows (§7.1): one active workflow per user; persisted transitions by event name, fenced by
-- the lease token of the worker stepping the workflow.
-- Fenced single-row statements test the state with IS NOT DISTINCT FROM (or wrap an IN list in
-- IS TRUE), never with a bare = or IN (issue 14). Same result for these NOT NULL columns, but the
-- planner cannot prove a partial index's predicate from it, so the row is found by its primary key.
-- With a bare comparison, statistics taken while few rows were live (an installation whose history
-- is finished work) made the planner prefer a live-state partial index that looked empty, and every
-- transition then scanned the whole backlog: quadratic in the backlog, until the next ANALYZE, which
-- on a table with a long history can be far off.

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text,
  p_trace_context text default null
) returns table (workflow_id uuid, action text, previous_trace_context text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_trace text := bitrix_sync._trace_context(p_trace_context);
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
      -- A rebind is never joined: converging to the App's intent would drop it (issue 11). The
      -- intent is held on its row, the newest one winning as in a join, and starts as the next
      -- workflow when the rebind ends (tg_workflow_instances__start_held_intent), so the App change
      -- is carried out against the mapping the rebind left.
      if v_row.workflow_type = 'contact.rebind' then
        if v_row.held_intent_type is not distinct from p_intent_type
           and v_row.held_content_hash is not distinct from p_content_hash then
          return query select v_row.id, 'unchanged'::text, v_row.trace_context;
          return;
        end if;
        update bitrix_sync.workflow_instances w
           set held_intent_type = p_intent_type, held_source_task_id = p_source_task_id,
               held_content_hash = p_content_hash, held_at = now()
         where w.id = v_row.id;
        return query select v_row.id, 'held'::text, v_row.trace_context;
        return;
      end if;
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text, v_row.trace_context;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- The workflow now converges to this intent: its remaining steps belong to its trace.
             trace_context = coalesce(v_trace, w.trace_context),
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text, v_row.trace_context;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text, null::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash,
                                                  trace_context)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash, v_trace)
      returning * into v_row;
    exception when unique_violation then
      -- Two intents of one user claimed at once: the other call started the workflow first and has
      -- committed by now (the index waited for it), so look again and join it.
      if v_try = 3 then
        raise;
      end if;
      continue;
    end;
    perform pg_notify('bitrix_sync_workflows', '');
    return query select v_row.id, 'started'::text, null::text;
    return;
  end loop;
end $$;
comment on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text, text) is
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step) and the workflow takes the intent''s trace context (W3C traceparent; malformed ones are ignored). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged). An active contact.rebind is not joined: the intent is held on it (action held) and starts when the rebind ends. previous_trace_context is the joined, held or unchanged workflow''s context before the call, for a span link.';

create or replace function bitrix_sync.take_sync_tasks(
  p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[],
  p_trace_contexts text[]
) returns table (task_id uuid, workflow_id uuid, action text, previous_trace_context text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer := coalesce(cardinality(p_ids), 0);
  v_out record;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_user_ids), 0) <> v_n
     or coalesce(cardinality(p_intent_types), 0) <> v_n or coalesce(cardinality(p_content_hashes), 0) <> v_n
     or coalesce(cardinality(p_trace_contexts), 0) <> v_n or v_n > 1000 then
    raise exception 'take_sync_tasks needs six arrays of one length, at most 1000'
      using errcode = 'BS004',
            hint = 'Pass intent ID, lease token, user ID, intent type, content hash and trace context per claimed intent, in claim order.';
  end if;
  -- In the order given (claim order): a user's later intent joins the workflow its earlier one
  -- started. Any refusal (a stale lease: BS001) fails the whole call, and the caller takes the
  -- intents one by one instead.
  for i in 1 .. v_n loop
    select * into v_out
      from bitrix_sync.start_or_join_workflow(p_user_ids[i], p_intent_types[i], p_ids[i], p_content_hashes[i],
                                              p_trace_contexts[i]);
    perform bitrix_sync.complete_sync_task(p_ids[i], p_lease_tokens[i]);
    task_id := p_ids[i];
    workflow_id := v_out.workflow_id;
    action := v_out.action;
    previous_trace_context := v_out.previous_trace_context;
    return next;
  end loop;
end $$;
comment on function bitrix_sync.take_sync_tasks(uuid[], uuid[], uuid[], text[], text[], text[]) is
  'Intake of a claimed batch in one call: for each intent, in the order given, start_or_join_workflow() and complete_sync_task() under its lease token, as the caller would one intent per transaction. One row per intent (its workflow, the action, the previous trace context). A stale lease refuses the whole call (BS001); arrays of different lengths or over 1000 elements BS004.';

create or replace function bitrix_sync.tg_workflow_instances__start_held_intent() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  -- The rebind's row has just left the active states, so the one-active-per-user index admits the
  -- next workflow. A concurrent intake waiting on the row lock finds this one and joins it.
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
  values (new.held_intent_type, new.held_intent_type, new.user_id, new.held_source_task_id, new.held_content_hash);
  perform pg_notify('bitrix_sync_workflows', '');
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__start_held_intent() is
  'AFTER UPDATE OF state trigger: when a workflow holding an App intent (a contact.rebind) finishes, however it finishes, the held intent starts as the user''s next workflow.';

drop trigger if exists _400_start_held_intent on bitrix_sync.workflow_instances;
create trigger _400_start_held_intent after update of state on bitrix_sync.workflow_instances
  for each row
  -- Written compactly, as _300_close_rebind_request's (sql/rebind.sql).
  when (new.held_intent_type is not null and new.state::text = any ('{succeeded,failed,cancelled}'::text[])
        and old.state::text <> all ('{succeeded,failed,cancelled}'::text[]))
  execute function bitrix_sync.tg_workflow_instances__start_held_intent();
comment on trigger _400_start_held_intent on bitrix_sync.workflow_instances is
  'Starts the App intent held during a rebind once the rebind has finished (after _300_close_rebind_request).';


create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer, p_lease interval
) returns setof bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  return query
  with picked as (
    select w.id from bitrix_sync.workflow_instances w
     where w.state in ('created', 'running', 'waiting_retry')
       and w.next_attempt_at <= now()
       and (w.lease_token is null or w.locked_until < now())
     order by w.next_attempt_at, w.created_at
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.workflow_instances w
     set state = 'running',
         lease_token = gen_random_uuid(),
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         attempt_count = w.attempt_count + 1
    from picked
   where w.id = picked.id
  returning w.*;
end $$;
comment on function bitrix_sync.claim_workflows(text, integer, interval) is
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due). Returns nothing before perform_cutover() and while paused (pause_sync()).';

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
         finished_at = case when v_to in ('succeeded', 'failed', 'cancelled') then now() end
   where w.id = p_id
  returning * into v_row;
  if v_to in ('waiting_retry', 'running') then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fire_workflow_event(uuid, uuid, text, jsonb) is
  'Moves a workflow along the edge named p_event from its current state (bitrix_sync.state_edges), applying the allowed changes. The caller must present the current lease token (null when none is held); stale holders get BS001, illegal events BS002.';

create or replace function bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state is not distinct from 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_workflow_lease(uuid, uuid, interval) is
  'Extends the lease of a running workflow. Refuses a stale token (BS001).';

create or replace function bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid)
returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  select * into v_row from bitrix_sync.workflow_instances
   where id = p_id and state is not distinct from 'running' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._held_workflow(uuid, uuid) is
  'Internal: the running workflow, locked, when the caller presents its current lease token; otherwise BS001.';

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

create or replace function bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances)
returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- Intake starts a workflow as soon as it is created; an admin's requeue starts it over.
  select coalesce(p_row.requeued_at, p_row.created_at)
$$;
comment on function bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances) is
  'Internal: where a workflow''s retry horizon starts: its last requeue by an admin, else its creation.';

create or replace function bitrix_sync.schedule_workflow_retry(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._workflow_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    perform bitrix_sync._dead_letter('workflow', v_row.id::text, v_row.workflow_type, 'retry_horizon_exceeded',
      v_row.attempt_count, bitrix_sync._workflow_first_attempt(v_row), v_row.id, null, v_row.correlation_id,
      null, null);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.schedule_workflow_retry(uuid, uuid, text, interval) is
  'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at, or the last requeue, + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';
