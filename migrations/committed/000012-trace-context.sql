--! Previous: sha1:05eadac7253206f3b542aa19561462adc0370838
--! Hash: sha1:754bac345ee3146cf69dedde9a77dfbad9941a69
--! Message: trace-context

-- Trace context across the durable queue (issue 12): a W3C traceparent stored with each workflow
-- (the intent that started or last joined it), each CRM command (the step that issued it) and each
-- inbox event (the receiver request that recorded it), set by the SQL functions that create those
-- rows from a new optional parameter. Null when tracing is off.
set local lock_timeout = '10s';

-- >>> sql/tracing.sql (included)
-- Trace context across the durable queue (issue 12, docs/observability.md): the service stores a W3C
-- traceparent with each workflow, command and inbox event, so work resumed by another loop, process
-- or release is traced under the intent or request that caused it. A context is only ever an
-- optional hint: a malformed one is dropped here instead of failing the write that carries it.

create or replace function bitrix_sync._trace_context(p_traceparent text) returns text
language sql immutable parallel safe as $$
  select case
    when p_traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
         and substr(p_traceparent, 4, 32) <> repeat('0', 32)
         and substr(p_traceparent, 37, 16) <> repeat('0', 16)
    then p_traceparent
  end
$$;
comment on function bitrix_sync._trace_context(text) is
  'The argument when it is a valid W3C traceparent (version 00, non-zero trace and span ids), else null: what the functions that store a trace context keep.';

revoke all on function bitrix_sync._trace_context(text) from public;
grant execute on function bitrix_sync._trace_context(text) to bitrix_sync_user;
-- <<< sql/tracing.sql

alter table bitrix_sync.workflow_instances add column if not exists trace_context text;
alter table bitrix_sync.crm_commands add column if not exists trace_context text;
alter table bitrix_sync.webhook_inbox add column if not exists trace_context text;

-- The format only, written out rather than through _trace_context(): a CHECK runs with the rights of
-- whoever writes the row, and no role should need a grant on a helper to write these tables. NOT
-- VALID: no scan under the migration's exclusive lock (validating in the same transaction would hold
-- it for the scan). Every existing row has a null context, so nothing unchecked is left; new and
-- updated rows are checked.
alter table bitrix_sync.workflow_instances drop constraint if exists workflow_instances_trace_context_chk,
  add constraint workflow_instances_trace_context_chk
  check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;
alter table bitrix_sync.crm_commands drop constraint if exists crm_commands_trace_context_chk,
  add constraint crm_commands_trace_context_chk
  check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;
alter table bitrix_sync.webhook_inbox drop constraint if exists webhook_inbox_trace_context_chk,
  add constraint webhook_inbox_trace_context_chk
  check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;

comment on column bitrix_sync.workflow_instances.trace_context is
  'W3C traceparent of the intake span of the intent the workflow converges to (the one that started it or last joined it); its steps are traced as its children. Null when tracing was off.';
comment on column bitrix_sync.crm_commands.trace_context is
  'W3C traceparent of the workflow step span that issued the command; each send is traced as its child, whichever process sends it. Null when tracing was off and for alert commands.';
comment on column bitrix_sync.webhook_inbox.trace_context is
  'W3C traceparent of the receiver''s inbox write span for this event; its processing is traced as its child. Null when tracing was off.';

-- >>> sql/workflows.sql (included)
-- Workflows (§7.1): one active workflow per user; persisted transitions by event name, fenced by
-- the lease token of the worker stepping the workflow.

-- Issue 12 added the intent's trace context (a parameter with a default, and the workflow's previous
-- context in the result): the four-argument form is replaced.
drop function if exists bitrix_sync.start_or_join_workflow(uuid, text, uuid, text);

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text,
  p_trace_context text default null
) returns table (workflow_id uuid, action text, previous_trace_context text)
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_trace text := bitrix_sync._trace_context(p_trace_context);
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
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
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step) and the workflow takes the intent''s trace context (W3C traceparent; malformed ones are ignored). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged). previous_trace_context is the joined or unchanged workflow''s context before the call, for a span link.';
revoke all on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text, text) from public;
grant execute on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text, text) to bitrix_sync_user;

create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.workflow_instances
language plpgsql as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
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
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due).';

create or replace function bitrix_sync.fire_workflow_event(
  p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb default '{}'::jsonb
) returns bitrix_sync.workflow_instances
language plpgsql as $$
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
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state = 'running' and lease_token = p_lease_token
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
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  select * into v_row from bitrix_sync.workflow_instances
   where id = p_id and state = 'running' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._held_workflow(uuid, uuid) is
  'Internal: the running workflow, locked, when the caller presents its current lease token; otherwise BS001.';

create or replace function bitrix_sync.save_workflow_step(
  p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text default null
) returns bitrix_sync.workflow_instances
language plpgsql as $$
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

create or replace function bitrix_sync.schedule_workflow_retry(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  -- A workflow is first attempted when it is created: intake starts it at once.
  v_deadline := bitrix_sync._retry_deadline(v_row.created_at);
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    insert into bitrix_sync.technical_dead_letters
      (source, source_id, workflow_id, operation, error_code, attempt_count, first_attempt_at, deadline_at,
       correlation_id)
    values ('workflow', v_row.id::text, v_row.id, v_row.workflow_type, 'retry_horizon_exceeded',
            v_row.attempt_count, v_row.created_at, v_deadline, v_row.correlation_id);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.schedule_workflow_retry(uuid, uuid, text, interval) is
  'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';
-- <<< sql/workflows.sql
-- >>> sql/commands.sql (included)
-- CRM commands (§7.2, §8, §9): issued by a workflow step, claimed by the pump under a lease,
-- marked in_flight (the durable "send started" marker) before the HTTP batch leaves, and completed
-- per sub-result. A write with no reply becomes uncertain and is never resent blindly.

create or replace function bitrix_sync._is_write_command(p_command_type text) returns boolean
language sql immutable parallel safe as $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;
comment on function bitrix_sync._is_write_command(text) is
  'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';

create or replace function bitrix_sync._wake_workflow(p_workflow_id uuid) returns void
language plpgsql as $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now()
   where id = p_workflow_id and state = 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync._wake_workflow(uuid) is
  'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';

-- Issue 12 added the issuing step's trace context (a parameter with a default): the five-argument
-- form is replaced.
drop function if exists bitrix_sync.issue_command(uuid, uuid, text, jsonb, text);

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text,
  p_trace_context text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  select * into v_wf from bitrix_sync.workflow_instances where id = p_workflow_id for update;
  if not found or v_wf.state <> 'running' or v_wf.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id, trace_context)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id,
          bitrix_sync._trace_context(p_trace_context))
  returning * into v_cmd;
  perform bitrix_sync.fire_workflow_event(p_workflow_id, p_lease_token, 'await_crm',
                                          jsonb_build_object('current_step', p_step));
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm at step p_step. The unique index allows one active command per workflow. p_trace_context is the issuing step''s W3C traceparent (malformed ones are ignored): every send of the command is traced under it.';
revoke all on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text) from public;
grant execute on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text) to bitrix_sync_user;

create or replace function bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
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

create or replace function bitrix_sync.claim_commands(
  p_worker text, p_limit integer default 20, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row record;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the batch.size and lease.ttl_sec settings.';
  end if;

  -- A holder that died with a request out: a write may have landed (uncertain), a read is retried.
  for v_row in
    select c.id, c.command_type, c.workflow_id from bitrix_sync.crm_commands c
     where c.status = 'in_flight' and c.locked_until < now()
     for update skip locked
  loop
    if bitrix_sync._is_write_command(v_row.command_type) then
      update bitrix_sync.crm_commands
         set status = 'uncertain', lease_token = null, locked_by = null, locked_until = null,
             last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
      if v_row.workflow_id is not null then
        perform bitrix_sync._wake_workflow(v_row.workflow_id);
      end if;
    else
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(), lease_token = null, locked_by = null,
             locked_until = null, last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
    end if;
  end loop;

  -- retry_wait -> pending (due), then claim pending and expired leased rows.
  update bitrix_sync.crm_commands c set status = 'pending'
   where c.id in (select d.id from bitrix_sync.crm_commands d
                   where d.status = 'retry_wait' and d.next_attempt_at <= now()
                   for update skip locked);

  return query
  with due as (
    select c.id, c.next_attempt_at as sort_at from bitrix_sync.crm_commands c
     where c.status = 'pending' and c.next_attempt_at <= now()
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  ), expired as (
    select c.id, c.locked_until as sort_at from bitrix_sync.crm_commands c
     where c.status = 'leased' and c.locked_until < now()
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) x order by sort_at limit p_limit
  )
  update bitrix_sync.crm_commands c
     set status = 'leased', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
         locked_until = now() + p_lease
    from picked
   where c.id = picked.id
  returning c.*;
end $$;
comment on function bitrix_sync.claim_commands(text, integer, interval) is
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait.';

-- The horizon used to be passed in by the pump; it is read from the settings here now.
drop function if exists bitrix_sync.send_commands(bigint[], uuid[], uuid, interval);

create or replace function bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid)
returns setof bigint
language plpgsql as $$
begin
  if coalesce(array_length(p_ids, 1), 0) <> coalesce(array_length(p_lease_tokens, 1), 0) then
    raise exception 'send_commands needs one lease token per command id'
      using errcode = 'BS004', hint = 'Pass the ids and tokens returned by claim_commands(), in the same order.';
  end if;
  return query
  update bitrix_sync.crm_commands c
     set status = 'in_flight', sent_at = now(), batch_id = p_batch_id, attempt_count = c.attempt_count + 1,
         first_sent_at = coalesce(c.first_sent_at, now()),
         deadline_at = bitrix_sync._retry_deadline(coalesce(c.first_sent_at, now()))
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where c.id = t.id and c.status = 'leased' and c.lease_token = t.token
  returning c.id;
end $$;
comment on function bitrix_sync.send_commands(bigint[], uuid[], uuid) is
  'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The first send stamps first_sent_at, where the retry horizon starts.';

create or replace function bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_command(bigint, uuid, jsonb) is
  'in_flight -> succeeded with a safe response projection, and wakes the workflow. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.release_command(p_id bigint, p_lease_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'pending', lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_command(bigint, uuid) is
  'leased -> pending without sending (no limiter token, method blocked, shutdown). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._check_bitrix_error(p_error text) returns void
language plpgsql immutable as $$
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

create or replace function bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands)
returns timestamptz
language sql stable as $$
  -- A command refused before it was ever sent has only its creation to count from.
  select coalesce(p_row.first_sent_at, p_row.created_at)
$$;
comment on function bitrix_sync._command_first_attempt(bitrix_sync.crm_commands) is
  'Internal: where a command''s retry horizon starts: its first send, or its creation if it was never sent.';

create or replace function bitrix_sync._dead_letter_command_row(
  p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text
) returns bitrix_sync.crm_commands
language plpgsql as $$
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
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
          p_http_status, left(p_bitrix_error, 64), v_row.attempt_count - v_row.limit_hits,
          v_first, v_row.deadline_at, v_row.correlation_id);
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands, text, integer, text) is
  'Internal: moves a held command to dead_letter, writes the technical DLQ row (first attempt and horizon) and wakes its workflow.';

create or replace function bitrix_sync.retry_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean default true,
  p_http_status integer default null, p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- The horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
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
  'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). When the retry would fall past the horizon (first send + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead; the returned status says which. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
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
  'in_flight -> uncertain: the request left and no reply came. The workflow recovers by searching, never by resending. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer default null,
  p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return bitrix_sync._dead_letter_command_row(v_row, p_error_code, p_http_status, p_bitrix_error);
end $$;
comment on function bitrix_sync.dead_letter_command(bigint, uuid, text, integer, text) is
  'leased|in_flight -> dead_letter with a technical DLQ row (permanent failure). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state = 'running' and w.lease_token = p_workflow_token
   for update of c;
  if not found then
    perform bitrix_sync._refuse_stale('workflow of command', p_command_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._workflow_holder(bigint, uuid) is
  'Internal: the command, locked, when the caller holds its workflow''s lease; otherwise BS001.';

create or replace function bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.begin_command_reconcile(bigint, uuid) is
  'uncertain -> reconcile: the workflow (holding its lease) starts the recovery search for an unanswered write.';

create or replace function bitrix_sync.resolve_command_reconcile(
  p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb default null,
  p_error_code text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
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
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      insert into bitrix_sync.technical_dead_letters
        (source, source_id, workflow_id, command_id, operation, error_code, attempt_count, first_attempt_at,
         deadline_at, correlation_id)
      values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
              v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
              bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)), v_row.correlation_id);
    else
      raise exception 'reconcile outcome must be succeeded, retry or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied) or dead_letter. Fenced by the workflow lease.';

create or replace function bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
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
-- <<< sql/commands.sql
-- >>> sql/receiver.sql (included)
-- Robot webhook receivers (§10.1, docs/receivers.md): the statement the receivers run. The HTTP
-- layer has already checked the token, the form and the portal identity; accept_webhooks() checks
-- what only the database knows (the alert smart process's entityTypeId, a hot setting) and inserts
-- the inbox rows, all in the statement's own transaction. The receiver sends the requests that
-- arrive together as one call (one round trip and one commit for all of them) and answers each
-- only after that commit; a refused event gets a refusal code and leaves no row.
--
-- Why grouped: PostgreSQL serialises the commits of transactions that NOTIFY (one global lock held
-- across the WAL flush). One row per transaction through record_webhook() (insert + NOTIFY)
-- measured 545 accepted requests/s against 2 600/s for a plain insert (pgbench, 16 clients, 2
-- cores); an add_job with a job_key per request, 262/s. So the wake-up for the sync loop's LISTEN
-- (bitrix_sync_webhooks, as record_webhook sends it) is sent once per call and receiver, whatever
-- the number of rows. The loop's fallback poll covers a lost wake-up (§8).
--
-- Refusal codes (accept_webhooks) and errors (accept_webhook, for psql): entity_type / BS020 the
-- entity type is not the receiver's (the HTTP layer answers 400), alert_entity_type_unset / BS021
-- alerts.entity_type_id is not set (503); BS022 unknown receiver and BS004 bad arrays are bugs in
-- the caller and fail the whole call.

-- Issue 12 added each request's trace context (an array with a default): the four-array form is
-- replaced.
drop function if exists bitrix_sync.accept_webhooks(text[], integer[], text[], inet[]);

create or replace function bitrix_sync.accept_webhooks(
  p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[],
  p_trace_contexts text[] default null
) returns table (ord integer, inbox_id bigint, refusal text)
language plpgsql as $$
declare
  v_n integer := coalesce(cardinality(p_receivers), 0);
  v_alert_type integer;
  v_expected integer;
begin
  if coalesce(cardinality(p_entity_type_ids), 0) <> v_n or coalesce(cardinality(p_entity_ids), 0) <> v_n
     or coalesce(cardinality(p_source_ips), 0) <> v_n or v_n > 1000
     or (p_trace_contexts is not null and cardinality(p_trace_contexts) <> v_n) then
    raise exception 'accept_webhooks needs four (or five) arrays of one length, at most 1000'
      using errcode = 'BS004', hint = 'Pass receiver, entity type, entity ID, source IP and optionally trace context per event, in that order.';
  end if;
  if 'alert' = any(p_receivers) then
    v_alert_type := (bitrix_sync.active_settings() ->> 'alerts.entity_type_id')::integer;
  end if;
  for i in 1 .. v_n loop
    ord := i;
    inbox_id := null;
    refusal := null;
    if p_receivers[i] = 'contact' then
      v_expected := 3;
    elsif p_receivers[i] = 'alert' then
      v_expected := v_alert_type;
    else
      raise exception 'unknown webhook receiver %', p_receivers[i]
        using errcode = 'BS022', hint = 'Receivers are contact and alert.';
    end if;
    if v_expected is null then
      refusal := 'alert_entity_type_unset';
    elsif p_entity_type_ids[i] is distinct from v_expected then
      refusal := 'entity_type';
    else
      insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, trace_context)
      values (p_receivers[i], p_entity_type_ids[i], p_entity_ids[i], p_source_ips[i],
              bitrix_sync._trace_context(p_trace_contexts[i]))
      returning id into inbox_id;
    end if;
    return next;
  end loop;
  -- One wake-up per call and receiver (not per row, see above) for the sync loop's LISTEN.
  if exists (select 1 from unnest(p_receivers) r where r = 'contact') then
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
  if exists (select 1 from unnest(p_receivers) r where r = 'alert') then
    perform pg_notify('bitrix_sync_webhooks', 'alert');
  end if;
end $$;
comment on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) is
  'Receiver entry point (§10.1): for each event (parallel arrays), checks the entity type against the receiver (3 for contact, alerts.entity_type_id for alert) and inserts an inbox row with the request''s trace context (W3C traceparent, malformed ones ignored); returns per event its 1-based ord and the inbox id, or a refusal (entity_type, alert_entity_type_unset) and no row.';

create or replace function bitrix_sync.accept_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null
) returns bigint
language plpgsql as $$
declare
  v_row record;
begin
  select * into v_row
    from bitrix_sync.accept_webhooks(array[p_receiver], array[p_entity_type_id], array[p_entity_id], array[p_source_ip]);
  if v_row.refusal = 'alert_entity_type_unset' then
    raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not set'
      using errcode = 'BS021',
            hint = 'Set the smart process entityTypeId with propose_settings(''{"alerts.entity_type_id": <id>}'', ...) and activate it.';
  elsif v_row.refusal is not null then
    raise exception 'the % receiver does not accept entity type %', p_receiver, p_entity_type_id
      using errcode = 'BS020',
            hint = 'The robot belongs to another document type or smart process; check the robot and alerts.entity_type_id.';
  end if;
  return v_row.inbox_id;
end $$;
comment on function bitrix_sync.accept_webhook(text, integer, text, inet) is
  'One event through accept_webhooks(), for psql and scripts: returns the inbox id; BS020 wrong entity type, BS021 alert receiver not configured; nothing is written then.';

revoke all on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) from public;
revoke all on function bitrix_sync.accept_webhook(text, integer, text, inet) from public;
grant execute on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) to bitrix_sync_user;
grant execute on function bitrix_sync.accept_webhook(text, integer, text, inet) to bitrix_sync_user;
-- <<< sql/receiver.sql
