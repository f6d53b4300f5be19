--! Previous: sha1:1a85e72d05582d5f647b19ce9c330850aa7f8186
--! Hash: sha1:87c4b4949293a7bce526706aa8133a206373ac66
--! Message: intake-batch

-- Intake takes a claimed batch of intents in one call (issue 14): take_sync_tasks() starts or joins
-- each intent's workflow and completes its queue row, in one transaction, where the service made
-- five round trips and one commit per intent. The runtime role may execute it (sql/privileges.sql).
set local lock_timeout = '10s';

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
language plpgsql as $$
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
language plpgsql as $$
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
  when (new.held_intent_type is not null and new.state in ('succeeded', 'failed', 'cancelled')
        and old.state not in ('succeeded', 'failed', 'cancelled'))
  execute function bitrix_sync.tg_workflow_instances__start_held_intent();
comment on trigger _400_start_held_intent on bitrix_sync.workflow_instances is
  'Starts the App intent held during a rebind once the rebind has finished (after _300_close_rebind_request).';


create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.workflow_instances
language plpgsql as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
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
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due). Returns nothing before perform_cutover().';

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

create or replace function bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances)
returns timestamptz
language sql stable as $$
  -- Intake starts a workflow as soon as it is created; an admin's requeue starts it over.
  select coalesce(p_row.requeued_at, p_row.created_at)
$$;
comment on function bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances) is
  'Internal: where a workflow''s retry horizon starts: its last requeue by an admin, else its creation.';

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
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._workflow_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    insert into bitrix_sync.technical_dead_letters
      (source, source_id, workflow_id, operation, error_code, attempt_count, first_attempt_at, deadline_at,
       correlation_id)
    values ('workflow', v_row.id::text, v_row.id, v_row.workflow_type, 'retry_horizon_exceeded',
            v_row.attempt_count, bitrix_sync._workflow_first_attempt(v_row), v_deadline, v_row.correlation_id);
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
-- <<< sql/workflows.sql
-- >>> sql/privileges.sql (included)
-- The privilege catalogue (§13, DESIGN.md "Roles"; issue 10): for every schema, table, view,
-- sequence and function of the project, what each of the three roles may do, written out, "nothing"
-- included. sql/grants.sql revokes everything and grants exactly this list; docs/security.md is
-- rendered from it; test/integration/privileges.test.ts checks that the database's ACLs equal it and
-- that no object of bitrix_sync (or the project's objects of han_app) lacks a decision.
--
-- Adding a function, table, view or sequence: add one row here (runtime, admin, app; '{}' is an
-- explicit "nothing") and include sql/privileges.sql and sql/grants.sql in the migration.
--
-- A privilege is written as GRANT takes it: 'SELECT', 'EXECUTE', 'USAGE', or with columns,
-- 'UPDATE (status, locked_by)'. Objects are schema-qualified; a function by its signature as
-- regprocedure prints it (types, no parameter names).
--
-- Who is who: bitrix_sync_user runs the service (the functions it calls and their internal
-- helpers; it writes its tables only in the columns those functions write, so an insert can never
-- name a state and identity or audit columns are out of reach; sql/row_guards.sql holds the same
-- rules for every writer). bitrix_sync_admin is an operator with psql: the audited admin functions
-- (security definer, so no table rights), the status views and the settings it changes.
-- han_app_user is the App: its identity and profile tables; sync_queue rows appear through the
-- security definer trigger.

create or replace view bitrix_sync.role_privileges as
with decisions (object_type, object_name, runtime, admin, app, note) as (values
  -- schemas
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], 'The project''s schema; the App has no business in it.'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], 'The App''s schema; the admin reaches the queue only through status_queue.'),

  -- App tables (§13: the runtime reads the columns it needs and writes only the CRM-master fields)
  ('table', 'han_app.user_identity', array['SELECT (id, phone_number, record_status, created_at, updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'Identity is App-master; the runtime reads it at send time.'),
  ('table', 'han_app.client_profile',
   array['SELECT (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)',
         'UPDATE (full_name, citizenship, email, source_updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'The runtime writes only the CRM-master fields (§3.1), through apply_crm_master_fields.'),
  ('table', 'han_app.sync_queue',
   array['SELECT', 'UPDATE (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code, last_error_at, completed_at, cancel_reason, updated_at)'],
   array[]::text[], array['SELECT'],
   'Intents appear through the App''s trigger; the runtime moves them through the lease functions and never inserts one.'),
  ('function', 'han_app.enqueue_contact_sync()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): fires for the App''s writes; nobody calls it.'),

  -- bitrix_sync tables the runtime writes through its functions: only the columns they write
  ('table', 'bitrix_sync.business_alerts',
   array['SELECT',
         'INSERT (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, previous_alert_id, correlation_id)',
         'UPDATE (occurrence_count, last_occurred_at, current_contact_id, selected_contact_id, candidate_contact_ids, details, correlation_id, crm_sync_status, item_id, stage_id, status, closed_at)'],
   array[]::text[], array[]::text[], 'Alerts are raised open and finished by the runtime; the admin sees them through status_alerts.'),
  ('sequence', 'bitrix_sync.business_alert_number_seq', array['USAGE'], array[]::text[], array[]::text[],
   'The default of business_alerts.alert_number, evaluated as the inserting role.'),
  ('table', 'bitrix_sync.contact_snapshots',
   array['SELECT',
         'INSERT (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)',
         'UPDATE (user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)'],
   array[]::text[], array[]::text[], 'Hashes of what the runtime last wrote into or read from each Contact.'),
  ('table', 'bitrix_sync.crm_commands',
   array['SELECT',
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)', 'UPDATE (status, closed_at, close_reason, workflow_id)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions; the user and the Contact of a link never change.'),
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash, trace_context)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at, trace_context)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- metrics (sql/metrics.sql): written by security definer triggers, read by metrics_snapshot()
  ('table', 'bitrix_sync.metric_event_totals', array[]::text[], array[]::text[], array[]::text[],
   'Counter totals; only metrics_snapshot() (security definer) folds into and reads them.'),
  ('table', 'bitrix_sync.metric_events', array[]::text[], array[]::text[], array[]::text[],
   'Counted events; appended by the security definer _900 triggers whoever makes the change.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, dead_letter_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
   'Audit of the admin functions (security definer) that write it; the Contact a decision named stays out of the admin''s reading.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),

  -- identity sequences: inserting into an identity column needs no right on its sequence
  ('sequence', 'bitrix_sync.admin_actions_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of admin_actions.'),
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),

  -- views
  ('view', 'bitrix_sync.parked_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Workflows waiting for a person, with their reason and the decisions that apply (docs/admin.md).'),
  ('view', 'bitrix_sync.rebind_request_status', array[]::text[], array['SELECT'], array[]::text[],
   'Rebind requests as an admin follows them (docs/admin.md).'),
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.'),
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).'),
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.'),
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.'),
  ('view', 'bitrix_sync.status_alert_mirror', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14): alerts whose smart-process item is behind (pending, failed); read by /metrics.'),
  ('view', 'bitrix_sync.status_commands', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_dead_letters', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_queue', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_webhooks', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_workflows', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),

  -- admin functions (security definer): cutover, settings, rebind, re-recording a lost webhook
  ('function', 'bitrix_sync.accept_webhook(text,integer,text,inet)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Re-records one robot call by hand (the robot does not retry).'),
  ('function', 'bitrix_sync.activate_settings_version(integer,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.perform_cutover(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The one-time cutover (§17); it also opens the processing gate.'),
  ('function', 'bitrix_sync.propose_settings(jsonb,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind (§5.4).'),
  ('function', 'bitrix_sync.cancel_rebind_request(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind: cancel an open request (docs/admin.md).'),
  ('function', 'bitrix_sync.resume_parked_workflow(uuid,text,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: resume with a decision.'),
  ('function', 'bitrix_sync.cancel_parked_workflow(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: cancel with a reason.'),
  ('function', 'bitrix_sync._parked_decisions(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The decisions a parked reason admits; called by the parked_workflows view with the reader''s rights.'),
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.list_dead_letters(boolean,integer)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: what is open, and what a requeue would do (docs/admin.md).'),
  ('function', 'bitrix_sync.acknowledge_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: resolved without a new attempt, audited.'),
  ('function', 'bitrix_sync.requeue_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: a new attempt through the normal state machine, audited.'),
  ('function', 'bitrix_sync.retention_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Retention: what the next run would delete (reads the history: by hand only).'),
  ('function', 'bitrix_sync.delete_retention_batch(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one batch of finished rows (security definer: nobody holds DELETE on those tables); the hourly task, or an admin now.'),

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),

  ('function', 'bitrix_sync.metrics_snapshot(text,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'GET /metrics (security definer): counts, ages and counters with low-cardinality labels; the admin may run it in psql.'),

  -- runtime functions: the receivers
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement (and the readiness probe of that path).'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
  ('function', 'bitrix_sync.watch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop takes the intake watch before it sleeps (the App''s intents then NOTIFY).'),
  ('function', 'bitrix_sync.unwatch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop releases the intake watch when it wakes.'),
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).'),
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  ('function', 'bitrix_sync.take_sync_tasks(uuid[],uuid[],uuid[],text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake of a claimed batch in one call.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.complete_commands(bigint[],uuid[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump settles a batch with it).'),
  ('function', 'bitrix_sync.bring_forward_commands(text[],integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump after a portal-wide failure).'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.mark_command_uncertain(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.reject_command(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.release_command(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.resolve_command_reconcile(bigint,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.retry_command(bigint,uuid,text,interval,boolean,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.send_commands(bigint[],uuid[],uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  -- runtime functions: the limiter
  ('function', 'bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.blocked_crm_methods(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_operating(text,text[],double precision[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_method_blocked(text,text,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_answered(text,double precision,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  -- runtime functions: inbox processing, mapping, snapshots, alerts, rebind workflow, reconciliation
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.recover_alert_command(bigint,interval)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Alert mirroring: an unanswered alert command moves on (sql/alert_mirror.sql).'),
  ('function', 'bitrix_sync.alerts_to_look_up(integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: items to look up.'),
  ('function', 'bitrix_sync.issue_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup of an item.'),
  ('function', 'bitrix_sync.resolve_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup''s outcome.'),
  ('function', 'bitrix_sync.fail_alert_lookup(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: a lookup that failed for good.'),
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.apply_crm_master_fields(uuid,text,text,text,text,text,text,text,timestamp with time zone,boolean,timestamp with time zone,timestamp with time zone,text,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots and the CRM-master profile write.'),
  ('function', 'bitrix_sync.mark_contact_snapshot_stale(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_created(text,uuid,text,text,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_phone(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.finish_business_alert(bigint,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirror_failed(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirrored(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.raise_business_alert(text,text,text,uuid,text,text,jsonb,jsonb,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.record_alert_item(bigint,bigint,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.complete_rebind(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync._close_rebind_request(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Security definer, called by the trigger that closes the request of a finished contact.rebind workflow (the runtime''s transitions fire it).'),
  ('function', 'bitrix_sync.start_rebind_request(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync.claim_reconciliation_cursor(text,interval,boolean,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation (gated by the cutover).'),
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.finish_reconciliation_run(text,uuid,integer,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),

  -- internal helpers the runtime's (security invoker) functions call: a nested call is checked
  -- against the calling role too
  ('function', 'bitrix_sync._check_bitrix_error(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._check_code(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: refuses raw text as an error code.'),
  ('function', 'bitrix_sync._check_limiter_name(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter.'),
  ('function', 'bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the queue functions.'),
  ('function', 'bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the inbox functions.'),
  ('function', 'bitrix_sync._held_workflow(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the workflow functions.'),
  ('function', 'bitrix_sync._is_write_command(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of claim_commands.'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue, start_or_join, accept_webhooks).'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue_command, start_or_join_workflow, accept_webhooks).'),
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.'),
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.'),
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.'),
  ('function', 'bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of schedule_workflow_retry: the horizon counts from a requeue.'),
  ('function', 'bitrix_sync._alert_add_unsafe(bigint)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the alert mirror (runAlertSync asks it before an add).'),

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._open_dead_letter(bigint)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._resolve_dead_letters(bigint[],text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._retention_cutoff(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.'),
  ('function', 'bitrix_sync._record_admin_action(text,uuid,uuid,text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._rebind_crm_outcome(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of _close_rebind_request and cancel_rebind_request.'),
  ('function', 'bitrix_sync.tg_workflow_instances__close_rebind_request()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__start_held_intent()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync._normalise_settings(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._rebind_request_of(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the rebind workflow functions.'),
  ('function', 'bitrix_sync._resolve_conflict_alerts(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of complete_rebind.'),
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.'),
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_crm_commands__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_technical_dead_letters__count()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_webhook_inbox__count_coalesced()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_workflow_instances__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_settings_versions__freeze()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
)
select d.object_type, d.object_name, r.role, r.privileges, d.note
  from decisions d
  cross join lateral (values ('bitrix_sync_user', d.runtime), ('bitrix_sync_admin', d.admin), ('han_app_user', d.app))
    as r(role, privileges);
comment on view bitrix_sync.role_privileges is
  'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why. sql/grants.sql applies exactly this; docs/security.md is rendered from it.';

-- What the database actually grants, in the catalogue's terms, and where the two differ. The
-- project's objects are all of schema bitrix_sync and the objects of han_app the catalogue names
-- (in production han_app holds the App's other tables, which are none of this project's business).
create or replace view bitrix_sync.role_privilege_drift as
with objects as (
  select 'schema'::text as object_type, n.nspname::text as object_name, n.nspowner as owner, n.nspacl as acl,
         null::oid as relid, 'n'::"char" as acl_kind
    from pg_namespace n where n.nspname in ('bitrix_sync', 'han_app')
  union all
  select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'view' else 'table' end,
         format('%I.%I', n.nspname, c.relname), c.relowner, c.relacl, c.oid,
         case c.relkind when 'S' then 's'::"char" else 'r'::"char" end
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
  union all
  select 'function', p.oid::regprocedure::text, p.proowner, p.proacl, null, 'f'::"char"
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('bitrix_sync', 'han_app')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
), catalogue as (
  select rp.object_type, rp.object_name, rp.role, rp.privileges from bitrix_sync.role_privileges rp
), project_objects as (
  select o.* from objects o
   where o.object_name = 'bitrix_sync' or o.object_name like 'bitrix\_sync.%'
      or exists (select 1 from catalogue c where c.object_type = o.object_type and c.object_name = o.object_name)
), roles (role) as (
  values ('bitrix_sync_user'), ('bitrix_sync_admin'), ('han_app_user')
), actual as (
  -- object-wide privileges ...
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC') as role, a.privilege_type as privilege,
         null::text as column_name
    from project_objects o
    cross join lateral aclexplode(coalesce(o.acl, acldefault(o.acl_kind, o.owner))) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
  union all
  -- ... and column privileges
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname::text
    from project_objects o
    join pg_attribute att on att.attrelid = o.relid and att.attnum > 0 and not att.attisdropped and att.attacl is not null
    cross join lateral aclexplode(att.attacl) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
), expected as (
  select c.object_type, c.object_name, c.role, m[1] as privilege, btrim(col) as column_name
    from catalogue c
    cross join lateral unnest(c.privileges) spec
    cross join lateral regexp_match(spec, '^([A-Z]+)\s*(?:\((.*)\))?$') m
    cross join lateral unnest(coalesce(string_to_array(m[2], ','), array[null]::text[])) col
)
select e.object_type, e.object_name, e.role, e.privilege, e.column_name, 'missing'::text as problem
  from expected e
 where exists (select 1 from project_objects o where o.object_type = e.object_type and o.object_name = e.object_name)
   and not exists (select 1 from actual a where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                            and a.column_name is not distinct from e.column_name)
union all
select a.object_type, a.object_name, a.role, a.privilege, a.column_name, 'extra'
  from actual a
 where not exists (select 1 from expected e where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                              and a.column_name is not distinct from e.column_name)
   -- PUBLIC is checked only on what the project owns (it never grants PUBLIC anything); the App's
   -- identity and profile tables and its schema keep whatever the App gives everyone.
   and not (a.role = 'PUBLIC' and a.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
union all
select o.object_type, o.object_name, r.role, null, null, 'undecided'
  from project_objects o cross join roles r
 where not exists (select 1 from catalogue c where (c.object_type, c.object_name, c.role) = (o.object_type, o.object_name, r.role))
union all
select distinct c.object_type, c.object_name, null, null, null, 'unknown_object'
  from catalogue c
 where not exists (select 1 from objects o where o.object_type = c.object_type and o.object_name = c.object_name);
comment on view bitrix_sync.role_privilege_drift is
  'Differences between the database''s ACLs and bitrix_sync.role_privileges for the three roles and PUBLIC: missing and extra privileges (column privileges by column), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object). Empty when they agree.';
-- <<< sql/privileges.sql
-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md): everything is revoked, then exactly what the catalogue
-- bitrix_sync.role_privileges (sql/privileges.sql) lists is granted. Re-runnable; include it (after
-- sql/privileges.sql) in every migration that adds or changes an object of the project.
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

do $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A catalogue row naming no object, or an object of the project without a decision for a role,
  -- stops the migration: the next step would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Add a row per new object to sql/privileges.sql (runtime, admin, app; ''{}'' for nothing) and drop rows of removed objects, then include sql/privileges.sql and sql/grants.sql in the migration.';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and tables keep whatever the App grants its other roles and everyone.
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user', v_kind, v_row.object_name);
  end loop;
  revoke all on han_app.sync_queue from public;
  revoke all on function han_app.enqueue_contact_sync() from public;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;
end $$;
-- <<< sql/grants.sql
