--! Previous: sha1:224a8c3ff7ecac91f17a4e6373bdb3302da4f6a3
--! Hash: sha1:62e0b2cbfb1bca3c3a040abd37ecf934dbcadb9b
--! Message: rebind-loop

-- The operator's loop, rebind and parked workflows (issue 11): a contact.rebind that always finishes
-- (its request closes with the workflow, whatever ends it), App changes held while a rebind runs
-- and started after it, a retried clear of the previous Contact that reads it again first, and
-- audited admin functions to list, resume and cancel parked workflows and to cancel open rebind
-- requests (docs/admin.md).
set local lock_timeout = '10s';

-- An App intent that arrives while the user's contact.rebind runs is held on the rebind's row and
-- becomes the next workflow when the rebind ends (sql/workflows.sql).
alter table bitrix_sync.workflow_instances
  add column if not exists held_intent_type varchar(32),
  add column if not exists held_source_task_id uuid,
  add column if not exists held_content_hash varchar(64),
  add column if not exists held_at timestamptz;
-- The columns are new, so every existing row satisfies the constraints below: NOT VALID skips the
-- scan under an exclusive lock, and new and changed rows are checked all the same.
alter table bitrix_sync.workflow_instances
  add constraint workflow_instances_held_intent
  check (held_intent_type is null
         or held_intent_type in ('contact.map_or_create', 'contact.update', 'contact.deactivate')) not valid;
comment on column bitrix_sync.workflow_instances.held_intent_type is
  'Newest App intent that arrived while this contact.rebind ran; it starts as the next workflow when the rebind ends.';
comment on column bitrix_sync.workflow_instances.held_source_task_id is
  'han_app.sync_queue row of the held intent.';
comment on column bitrix_sync.workflow_instances.held_content_hash is
  'Content hash of the held intent (as content_hash).';
comment on column bitrix_sync.workflow_instances.held_at is 'When the held intent last arrived.';

-- What a finished rebind request left in the CRM, and who cancelled it and why.
alter table bitrix_sync.rebind_requests
  add column if not exists outcome varchar(64),
  add column if not exists cancelled_by varchar(128),
  add column if not exists cancel_reason text;
-- New columns, as above.
alter table bitrix_sync.rebind_requests
  add constraint rebind_requests_outcome_code check (outcome is null or outcome ~ '^[a-z][a-z0-9_]{2,63}$') not valid;
alter table bitrix_sync.rebind_requests
  add constraint rebind_requests_cancel_audit
  check (status = 'cancelled' or (cancel_reason is null and cancelled_by is null)) not valid;
comment on column bitrix_sync.rebind_requests.outcome is
  'What the CRM holds when the request finished: rebound, crm_unchanged, target_write_unconfirmed, target_written, target_written_clear_unconfirmed, target_written_previous_cleared (docs/admin.md).';
comment on column bitrix_sync.rebind_requests.cancelled_by is 'Operator who cancelled the request (cancel_rebind_request).';
comment on column bitrix_sync.rebind_requests.cancel_reason is 'Why the operator cancelled it (free text written by an admin).';

-- Who did what and why, for every admin function that changes a workflow or a request.
create table if not exists bitrix_sync.admin_actions (
  id bigint generated always as identity primary key,
  action varchar(64) not null check (action ~ '^[a-z][a-z0-9_]{2,63}$'),
  -- No foreign key: finished workflows may be removed by retention, their audit stays.
  workflow_id uuid,
  rebind_request_id uuid references bitrix_sync.rebind_requests (id),
  decision varchar(32) check (decision is null or decision ~ '^[a-z][a-z0-9_]{1,31}$'),
  contact_id varchar(128) check (contact_id is null or contact_id ~ '^[1-9][0-9]{0,17}$'),
  reason text not null check (length(btrim(reason)) between 3 and 500),
  operator_id varchar(128) not null check (length(btrim(operator_id)) > 0),
  db_user varchar(128) not null default session_user,
  performed_at timestamptz not null default now()
);
-- A new, empty table: the index builds instantly.
-- squawk-ignore require-concurrent-index-creation
create index if not exists admin_actions_workflow_idx on bitrix_sync.admin_actions (workflow_id, performed_at);
comment on table bitrix_sync.admin_actions is
  'Audit of the admin functions (resume and cancel of parked workflows, cancel of rebind requests): the action, what it applied to, the operator''s id and reason, the database login. Never deleted.';
comment on column bitrix_sync.admin_actions.action is 'resume_workflow, cancel_workflow, cancel_rebind_request, ...';
comment on column bitrix_sync.admin_actions.decision is 'The resume decision: retry, link_contact, create_contact.';
comment on column bitrix_sync.admin_actions.contact_id is 'The Contact a link_contact decision named.';
comment on column bitrix_sync.admin_actions.operator_id is 'Who acted (operator identifier, as given).';
comment on column bitrix_sync.admin_actions.db_user is 'The database login (session_user) that ran the function.';

-- >>> sql/state_machines.sql (included)
-- State machines (§6.1, §7.1, §7.2, §7.3, §6.3): the legal edges as data, and one guard trigger per
-- table that refuses any UPDATE of the state column not on this list, whoever writes it.
-- docs/state-machines.md draws the same edges; a test keeps the two equal.

create or replace view bitrix_sync.state_edges as
select machine, from_state, to_state, event
  from (values
    -- han_app.sync_queue (§6.1)
    ('sync_queue', 'pending', 'leased', 'claim'),
    ('sync_queue', 'retry_wait', 'leased', 'claim'),
    ('sync_queue', 'leased', 'processed', 'complete'),
    ('sync_queue', 'leased', 'retry_wait', 'retry'),
    ('sync_queue', 'leased', 'dead_letter', 'dead_letter'),
    ('sync_queue', 'leased', 'cancelled', 'cancel'),
    ('sync_queue', 'leased', 'pending', 'release'),
    ('sync_queue', 'retry_wait', 'pending', 'newer_intent'),
    ('sync_queue', 'pending', 'cancelled', 'cancel'),
    ('sync_queue', 'retry_wait', 'cancelled', 'cancel'),
    -- bitrix_sync.workflow_instances (§7.1)
    ('workflow', 'created', 'running', 'start'),
    ('workflow', 'created', 'cancelled', 'cancel'),
    ('workflow', 'running', 'waiting_crm', 'await_crm'),
    ('workflow', 'running', 'waiting_retry', 'schedule_retry'),
    ('workflow', 'running', 'waiting_manual', 'need_manual'),
    ('workflow', 'running', 'succeeded', 'succeed'),
    ('workflow', 'running', 'failed', 'fail'),
    ('workflow', 'running', 'cancelled', 'cancel'),
    ('workflow', 'waiting_crm', 'running', 'crm_replied'),
    ('workflow', 'waiting_crm', 'failed', 'fail'),
    ('workflow', 'waiting_crm', 'cancelled', 'cancel'),
    ('workflow', 'waiting_retry', 'running', 'retry_due'),
    ('workflow', 'waiting_retry', 'failed', 'fail'),
    ('workflow', 'waiting_retry', 'cancelled', 'cancel'),
    ('workflow', 'waiting_manual', 'running', 'manual_resume'),
    ('workflow', 'waiting_manual', 'failed', 'fail'),
    ('workflow', 'waiting_manual', 'cancelled', 'cancel'),
    -- bitrix_sync.crm_commands (§7.2)
    ('command', 'pending', 'leased', 'claim'),
    ('command', 'pending', 'dead_letter', 'abandon'),
    ('command', 'leased', 'in_flight', 'send'),
    ('command', 'leased', 'pending', 'release'),
    ('command', 'leased', 'retry_wait', 'retry'),
    ('command', 'leased', 'dead_letter', 'dead_letter'),
    ('command', 'in_flight', 'succeeded', 'complete'),
    ('command', 'in_flight', 'retry_wait', 'retry'),
    ('command', 'in_flight', 'uncertain', 'no_reply'),
    ('command', 'in_flight', 'dead_letter', 'dead_letter'),
    ('command', 'retry_wait', 'pending', 'due'),
    ('command', 'retry_wait', 'dead_letter', 'abandon'),
    ('command', 'uncertain', 'reconcile', 'reconcile'),
    ('command', 'reconcile', 'succeeded', 'complete'),
    ('command', 'reconcile', 'retry_wait', 'retry'),
    ('command', 'reconcile', 'dead_letter', 'dead_letter'),
    -- bitrix_sync.webhook_inbox (§7.3)
    ('webhook', 'received', 'coalesced', 'coalesce'),
    ('webhook', 'received', 'processing', 'claim'),
    ('webhook', 'retry_wait', 'processing', 'claim'),
    ('webhook', 'processing', 'processed', 'complete'),
    ('webhook', 'processing', 'retry_wait', 'retry'),
    ('webhook', 'processing', 'dead_letter', 'dead_letter'),
    ('webhook', 'coalesced', 'processed', 'covered'),
    -- bitrix_sync.entity_external_mapping (§6.3)
    ('mapping', 'active', 'closed', 'close'),
    ('mapping', 'active', 'broken', 'mark_broken'),
    -- bitrix_sync.business_alerts (§11)
    ('alert', 'open', 'resolved', 'resolve'),
    ('alert', 'open', 'closed', 'close'),
    ('alert', 'open', 'remote_missing', 'remote_missing'),
    -- bitrix_sync.rebind_requests (§5.4)
    ('rebind', 'requested', 'in_progress', 'start'),
    ('rebind', 'requested', 'cancelled', 'cancel'),
    ('rebind', 'requested', 'failed', 'fail'),
    ('rebind', 'in_progress', 'succeeded', 'succeed'),
    ('rebind', 'in_progress', 'failed', 'fail'),
    ('rebind', 'in_progress', 'cancelled', 'cancel'),
    -- bitrix_sync.settings_versions (§12.3)
    ('settings', 'draft', 'validated', 'validate'),
    ('settings', 'draft', 'rejected', 'validate'),
    ('settings', 'validated', 'active', 'activate'),
    ('settings', 'active', 'superseded', 'supersede')
  ) as e(machine, from_state, to_state, event);
comment on view bitrix_sync.state_edges is
  'Every legal state transition of every machine, named by its event. The guard triggers and docs/state-machines.md follow this list.';

create or replace function bitrix_sync.tg__guard_transition() returns trigger
language plpgsql as $$
-- TG_ARGV[0]: machine name in state_edges; TG_ARGV[1]: the state column.
declare
  v_from text := to_jsonb(old) ->> tg_argv[1];
  v_to text := to_jsonb(new) ->> tg_argv[1];
begin
  if v_from is distinct from v_to
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = v_from and e.to_state = v_to) then
    raise exception 'illegal % transition % -> %', tg_argv[0], v_from, v_to
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg__guard_transition() is
  'BEFORE UPDATE guard: refuses a change of the state column (TG_ARGV[1]) that is not an edge of machine TG_ARGV[0] in bitrix_sync.state_edges. SQLSTATE BS002.';

create or replace function bitrix_sync.tg__forbid_delete() returns trigger
language plpgsql as $$
begin
  raise exception 'rows of %.% are history and are never deleted', tg_table_schema, tg_table_name
    using errcode = 'BS003',
          hint = 'Close or supersede the row through its bitrix_sync function instead.';
end $$;
comment on function bitrix_sync.tg__forbid_delete() is
  'BEFORE DELETE guard for history tables (mapping, settings versions, rebind requests, the cutover). SQLSTATE BS003.';

-- Guards and updated_at stamps, one per table. drop/create keeps this file re-runnable.
drop trigger if exists _100_guard_status on han_app.sync_queue;
create trigger _100_guard_status before update of status on han_app.sync_queue
  for each row execute function bitrix_sync.tg__guard_transition('sync_queue', 'status');
comment on trigger _100_guard_status on han_app.sync_queue is 'Refuses illegal queue status changes (bitrix_sync.state_edges).';

drop trigger if exists _100_guard_state on bitrix_sync.workflow_instances;
create trigger _100_guard_state before update of state on bitrix_sync.workflow_instances
  for each row execute function bitrix_sync.tg__guard_transition('workflow', 'state');
comment on trigger _100_guard_state on bitrix_sync.workflow_instances is 'Refuses illegal workflow state changes (§7.1).';

drop trigger if exists _100_guard_status on bitrix_sync.crm_commands;
create trigger _100_guard_status before update of status on bitrix_sync.crm_commands
  for each row execute function bitrix_sync.tg__guard_transition('command', 'status');
comment on trigger _100_guard_status on bitrix_sync.crm_commands is 'Refuses illegal command status changes (§7.2).';

drop trigger if exists _100_guard_status on bitrix_sync.webhook_inbox;
create trigger _100_guard_status before update of status on bitrix_sync.webhook_inbox
  for each row execute function bitrix_sync.tg__guard_transition('webhook', 'status');
comment on trigger _100_guard_status on bitrix_sync.webhook_inbox is 'Refuses illegal webhook status changes (§7.3).';

drop trigger if exists _100_guard_status on bitrix_sync.entity_external_mapping;
create trigger _100_guard_status before update of status on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__guard_transition('mapping', 'status');
comment on trigger _100_guard_status on bitrix_sync.entity_external_mapping is 'closed and broken mappings are final.';

drop trigger if exists _100_guard_status on bitrix_sync.business_alerts;
create trigger _100_guard_status before update of status on bitrix_sync.business_alerts
  for each row execute function bitrix_sync.tg__guard_transition('alert', 'status');
comment on trigger _100_guard_status on bitrix_sync.business_alerts is 'Only open alerts change status.';

drop trigger if exists _100_guard_status on bitrix_sync.rebind_requests;
create trigger _100_guard_status before update of status on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__guard_transition('rebind', 'status');
comment on trigger _100_guard_status on bitrix_sync.rebind_requests is 'Refuses illegal rebind request status changes (§5.4).';

drop trigger if exists _100_guard_status on bitrix_sync.settings_versions;
create trigger _100_guard_status before update of status on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__guard_transition('settings', 'status');
comment on trigger _100_guard_status on bitrix_sync.settings_versions is 'Only validated versions become active (§12.3).';

drop trigger if exists _200_forbid_delete on bitrix_sync.entity_external_mapping;
create trigger _200_forbid_delete before delete on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.entity_external_mapping is 'Mapping history is never deleted (§4).';

drop trigger if exists _200_forbid_delete on bitrix_sync.settings_versions;
create trigger _200_forbid_delete before delete on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.settings_versions is 'Settings audit is never deleted.';

drop trigger if exists _200_forbid_delete on bitrix_sync.rebind_requests;
create trigger _200_forbid_delete before delete on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.rebind_requests is 'Rebind audit is never deleted.';

do $$
declare
  v_table text;
begin
  foreach v_table in array array['entity_external_mapping', 'workflow_instances', 'crm_commands', 'business_alerts',
                                 'rebind_requests', 'contact_snapshots', 'reconciliation_cursors']
  loop
    execute format('drop trigger if exists _900_set_updated_at on bitrix_sync.%I', v_table);
    execute format('create trigger _900_set_updated_at before update on bitrix_sync.%I
                      for each row execute function bitrix_sync.tg__set_updated_at()', v_table);
    execute format('comment on trigger _900_set_updated_at on bitrix_sync.%I is %L', v_table,
                   'Stamps updated_at on every change.');
  end loop;
end $$;
-- <<< sql/state_machines.sql
-- >>> sql/workflows.sql (included)
-- Workflows (§7.1): one active workflow per user; persisted transitions by event name, fenced by
-- the lease token of the worker stepping the workflow.

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text
) returns table (workflow_id uuid, action text)
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
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
          return query select v_row.id, 'unchanged'::text;
          return;
        end if;
        update bitrix_sync.workflow_instances w
           set held_intent_type = p_intent_type, held_source_task_id = p_source_task_id,
               held_content_hash = p_content_hash, held_at = now()
         where w.id = v_row.id;
        return query select v_row.id, 'held'::text;
        return;
      end if;
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash)
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
    return query select v_row.id, 'started'::text;
    return;
  end loop;
end $$;
comment on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text) is
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged). An active contact.rebind is not joined: the intent is held on it (action held) and starts when the rebind ends.';

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

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text
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
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id)
  returning * into v_cmd;
  perform bitrix_sync.fire_workflow_event(p_workflow_id, p_lease_token, 'await_crm',
                                          jsonb_build_object('current_step', p_step));
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm at step p_step. The unique index allows one active command per workflow.';

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
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
    return;
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
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait. Returns nothing before perform_cutover().';

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
      if now() > bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)) then
        -- Past the horizon (§9) a write that keeps getting no reply is not sent again: without
        -- this, a portal that never answers would keep the workflow waiting for ever.
        update bitrix_sync.crm_commands
           set status = 'dead_letter', completed_at = now(), last_error_code = 'retry_horizon_exceeded'
         where id = p_id returning * into v_row;
        insert into bitrix_sync.technical_dead_letters
          (source, source_id, workflow_id, command_id, operation, error_code, attempt_count, first_attempt_at,
           deadline_at, correlation_id)
        values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type,
                'retry_horizon_exceeded', v_row.attempt_count - v_row.limit_hits,
                bitrix_sync._command_first_attempt(v_row),
                bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)), v_row.correlation_id);
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
      insert into bitrix_sync.technical_dead_letters
        (source, source_id, workflow_id, command_id, operation, error_code, attempt_count, first_attempt_at,
         deadline_at, correlation_id)
      values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
              v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
              bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)), v_row.correlation_id);
    else
      raise exception 'reconcile outcome must be succeeded, retry, superseded or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied; dead_letter with retry_horizon_exceeded and a DLQ row instead once the command is past its horizon, so the caller must look at the returned status) or dead_letter (superseded: dead_letter without a DLQ row, the workflow reads again and decides). Fenced by the workflow lease.';

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
-- >>> sql/rebind.sql (included)
-- Audited rebind request (§5.4): an admin asks to move a user's link to another Contact. The
-- procedure records the request and starts a contact.rebind workflow; the mapping itself changes
-- only when the workflow has updated both Contacts. The runtime role only reads rebind requests:
-- the functions a rebind workflow calls under its lease are security definer, so the audit columns
-- (reason, operator) are out of its reach.

create or replace function bitrix_sync.request_bitrix_contact_rebind(
  user_id uuid, target_b24_id text, reason text, operator_id text
) returns uuid
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_current bitrix_sync.entity_external_mapping;
  v_open bitrix_sync.rebind_requests;
  v_busy bitrix_sync.workflow_instances;
  v_request_id uuid;
  v_workflow_id uuid;
  v_user_id constant uuid := request_bitrix_contact_rebind.user_id;
  v_target constant text := btrim(request_bitrix_contact_rebind.target_b24_id);
begin
  -- Messages name no user or Contact (the server log keeps them): the caller knows which it asked for.
  if v_user_id is null or v_target is null or v_target !~ '^[1-9][0-9]{0,17}$' then
    raise exception 'target_b24_id must be a Bitrix24 Contact ID (digits only) and user_id is required'
      using errcode = 'BS004', hint = 'Example: select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''12345'', ''duplicate merged by CRM team'', ''ops:ivanov'');';
  end if;
  if reason is null or length(btrim(reason)) < 3 or length(btrim(reason)) > 500
     or operator_id is null or length(btrim(operator_id)) = 0 then
    raise exception 'a reason (3 to 500 characters) and an operator_id are required for the audit'
      using errcode = 'BS004', hint = 'Say why the link is wrong and who you are.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = v_user_id and u.record_status = 'active') then
    raise exception 'this user does not exist or is not active'
      using errcode = 'BS005', hint = 'Only active users are linked to Contacts; check the user id.';
  end if;

  -- 1. lock the user's current active mapping (there may be none).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_user_id and m.status = 'active'
   for update;
  if found and v_current.external_id = v_target then
    raise exception 'this user is already linked to this Contact'
      using errcode = 'BS006', hint = 'Nothing to do.';
  end if;
  -- 2. the target must not be actively linked to another user.
  perform 1 from bitrix_sync.entity_external_mapping m
   where m.external_entity_type = 'contact' and m.external_id = v_target and m.status = 'active'
   for update;
  if found then
    raise exception 'the target Contact is actively linked to another user'
      using errcode = 'BS006',
            hint = 'Resolve that user''s link first (deactivate or rebind it); a Contact cannot serve two active users.';
  end if;
  select * into v_open from bitrix_sync.rebind_requests r
   where r.user_id = v_user_id and r.status in ('requested', 'in_progress');
  if found then
    raise exception 'a rebind of this user is already open (request %)', v_open.id
      using errcode = 'BS007',
            hint = format('Watch it with select * from bitrix_sync.rebind_request_status where request_id = %L; '
                          'or cancel it with select * from bitrix_sync.cancel_rebind_request(%L, ''<why>'', ''ops:<you>''); '
                          'then ask again.', v_open.id, v_open.id);
  end if;
  -- Two open requests for one target would race for the same Contact; the second would fail late,
  -- after both Contacts were read and written.
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.target_contact_id = v_target and r.status in ('requested', 'in_progress')) then
    raise exception 'Contact % is already the target of an open rebind request', v_target
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end if;
  select * into v_busy from bitrix_sync.workflow_instances w
   where w.user_id = v_user_id and w.state not in ('succeeded', 'failed', 'cancelled');
  if found and v_busy.state = 'waiting_manual' then
    raise exception 'this user has a workflow parked for a person (workflow %, reason %)', v_busy.id, v_busy.last_error_code
      using errcode = 'BS007',
            hint = format('Decide it first: select * from bitrix_sync.resume_parked_workflow(%L, ''retry'', ''<why>'', ''ops:<you>''); '
                          'or cancel it with select * from bitrix_sync.cancel_parked_workflow(%L, ''<why>'', ''ops:<you>''); '
                          'then ask again (docs/admin.md, Parked workflows).', v_busy.id, v_busy.id);
  elsif found then
    raise exception 'this user has a % workflow in progress (workflow %, state %)', v_busy.workflow_type, v_busy.id, v_busy.state
      using errcode = 'BS007',
            hint = 'It finishes on its own, usually within seconds (a CRM outage can make it wait); ask again then. A user has one workflow at a time.';
  end if;

  -- 3. the request and its workflow; the mapping is untouched (4).
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, contact_id, step_data)
  values ('contact.rebind', 'contact.rebind', v_user_id, v_target,
          jsonb_build_object('previous_contact_id', v_current.external_id, 'target_contact_id', v_target))
  returning id into v_workflow_id;
  begin
    insert into bitrix_sync.rebind_requests (user_id, previous_contact_id, target_contact_id, reason, operator_id, workflow_id)
    values (v_user_id, v_current.external_id, v_target, btrim(reason), btrim(operator_id), v_workflow_id)
    returning id into v_request_id;
  exception when unique_violation then
    -- A concurrent request for the same target (or user) committed between the checks and here.
    raise exception 'Contact % or user % already has an open rebind request', v_target, v_user_id
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end;
  perform pg_notify('bitrix_sync_workflows', '');
  return v_request_id;
end $$;
comment on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) is
  'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user or already the target of an open request (BS009), and refuses while the user has an open request or a workflow (a parked one is named with how to clear it); records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';

create or replace function bitrix_sync._rebind_request_of(p_workflow_id uuid) returns bitrix_sync.rebind_requests
language plpgsql as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_row from bitrix_sync.rebind_requests where workflow_id = p_workflow_id for update;
  if not found then
    raise exception 'workflow % has no rebind request', p_workflow_id
      using errcode = 'BS005', hint = 'A contact.rebind workflow is started only by request_bitrix_contact_rebind().';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._rebind_request_of(uuid) is
  'Internal: the rebind request a contact.rebind workflow serves, locked; BS005 when there is none.';

create or replace function bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status = 'in_progress' then
    -- The workflow began this pass again (a Contact vanished mid-way): already started.
    return v_row;
  end if;
  if v_row.status <> 'requested' then
    raise exception 'rebind request % is %, it cannot start', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished; ask again with request_bitrix_contact_rebind().';
  end if;
  update bitrix_sync.rebind_requests set status = 'in_progress' where id = v_row.id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.start_rebind_request(uuid, uuid) is
  'requested -> in_progress when the contact.rebind workflow starts reading the Contacts (a request already in progress is returned as it is). Fenced by the workflow''s lease token (BS001). Security definer: the runtime role only reads rebind requests.';

-- The request closes with its workflow (tg_workflow_instances__close_rebind_request): the function
-- each failing path had to remember is gone.
drop function if exists bitrix_sync.fail_rebind_request(uuid, uuid, text);

create or replace function bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
  v_current bitrix_sync.entity_external_mapping;
begin
  v_wf := bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status <> 'in_progress' then
    raise exception 'rebind request % is %, not in_progress', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'start_rebind_request() first; a finished request stays finished.';
  end if;
  -- Both Contacts are updated: the link moves, the request ends and the conflicts that led to it are
  -- resolved in one transaction (§5.4, §11).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_wf.user_id and m.status = 'active'
   for update;
  if found then
    perform bitrix_sync.close_mapping(v_current.id, 'rebound', p_workflow_id);
  end if;
  perform bitrix_sync.open_mapping(v_wf.user_id, v_row.target_contact_id, p_workflow_id);
  update bitrix_sync.rebind_requests set status = 'succeeded', outcome = 'rebound', completed_at = now()
   where id = v_row.id
  returning * into v_row;
  -- Step 6: the alerts are resolved only here, after the link moved, in the same transaction.
  perform bitrix_sync._resolve_conflict_alerts(v_wf.user_id);
  return v_row;
end $$;
comment on function bitrix_sync.complete_rebind(uuid, uuid) is
  'in_progress -> succeeded (outcome rebound) for the request of a contact.rebind workflow, in one call: closes the user''s active mapping (rebound), opens the link to the target Contact, and then resolves the user''s open conflict alerts. Fenced by the workflow''s lease token (BS001); BS006 if the target is linked meanwhile. Security definer, as start_rebind_request.';

create or replace function bitrix_sync._rebind_crm_outcome(p_workflow_id uuid) returns text
language sql stable as $$
  -- The rebind's writes: the target write sets this user (set_user self), the clear of the previous
  -- Contact removes it (set_user clear). Only writes that were sent count.
  with w as (
    select coalesce(bool_or(x.set_user = 'self'), false) as target_sent,
           coalesce(bool_or(x.set_user = 'self' and x.ok), false) as target_done,
           coalesce(bool_or(x.set_user = 'clear'), false) as clear_sent,
           coalesce(bool_or(x.set_user = 'clear' and x.ok), false) as clear_done
      from (select c.params ->> 'set_user' as set_user, c.status = 'succeeded' as ok
              from bitrix_sync.crm_commands c
             where c.workflow_id = p_workflow_id and c.alert_id is null
               and c.command_type = 'contact.update' and c.first_sent_at is not null) x
  )
  select case
           when not target_sent then 'crm_unchanged'
           when not target_done then 'target_write_unconfirmed'
           when not clear_sent then 'target_written'
           when not clear_done then 'target_written_clear_unconfirmed'
           else 'target_written_previous_cleared'
         end
    from w
$$;
comment on function bitrix_sync._rebind_crm_outcome(uuid) is
  'Internal: what a contact.rebind workflow that did not complete left in the CRM, from its commands: crm_unchanged (no write sent), target_write_unconfirmed (sent, never confirmed), target_written (the target carries the user, the previous Contact was not cleared), target_written_clear_unconfirmed, target_written_previous_cleared (both written, the link did not move).';

create or replace function bitrix_sync._close_rebind_request(p_wf bitrix_sync.workflow_instances)
returns bitrix_sync.rebind_requests
-- Security definer: the runtime role's workflow transitions fire it, and that role only reads
-- rebind requests (docs/security.md).
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  -- A cancelled workflow cancels its request; any other end without complete_rebind fails it with
  -- the workflow's code (a refusal, a CRM error, the retry horizon of a command or of a step).
  update bitrix_sync.rebind_requests r
     set status = case when p_wf.state = 'cancelled' then 'cancelled' else 'failed' end,
         failure_code = case p_wf.state when 'cancelled' then null
                                        when 'failed' then coalesce(p_wf.last_error_code, 'rebind_not_completed')
                                        else 'rebind_not_completed' end,
         outcome = bitrix_sync._rebind_crm_outcome(p_wf.id),
         completed_at = now()
   where r.workflow_id = p_wf.id and r.status in ('requested', 'in_progress')
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync._close_rebind_request(bitrix_sync.workflow_instances) is
  'Internal: the still open request of a finished contact.rebind workflow becomes failed (failure_code = the workflow''s last_error_code) or cancelled, with the outcome it left in the CRM. Returns null when the request was already finished.';

create or replace function bitrix_sync.tg_workflow_instances__close_rebind_request() returns trigger
language plpgsql as $$
begin
  perform bitrix_sync._close_rebind_request(new);
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__close_rebind_request() is
  'AFTER UPDATE OF state trigger: a contact.rebind workflow that reaches a final state closes its open request, so no failing path can leave it in_progress (which would refuse every later rebind of the user).';

drop trigger if exists _300_close_rebind_request on bitrix_sync.workflow_instances;
create trigger _300_close_rebind_request after update of state on bitrix_sync.workflow_instances
  for each row
  when (new.workflow_type = 'contact.rebind' and new.state in ('succeeded', 'failed', 'cancelled')
        and old.state not in ('succeeded', 'failed', 'cancelled'))
  execute function bitrix_sync.tg_workflow_instances__close_rebind_request();
comment on trigger _300_close_rebind_request on bitrix_sync.workflow_instances is
  'Closes the rebind request of a contact.rebind workflow that finished without complete_rebind (§5.4, issue 11).';
-- <<< sql/rebind.sql
-- >>> sql/admin_common.sql (included)
-- What the admin functions share (docs/admin.md): the audit every one of them writes in its own
-- transaction (who and why, bitrix_sync.admin_actions), and closing the CRM commands of a workflow
-- an admin cancels, so that nothing is sent for it afterwards.

create or replace function bitrix_sync._check_admin_audit(p_reason text, p_operator_id text) returns void
language plpgsql immutable as $$
begin
  if p_reason is null or length(btrim(p_reason)) not between 3 and 500
     or p_operator_id is null or length(btrim(p_operator_id)) not between 1 and 128 then
    raise exception 'a reason (3 to 500 characters) and an operator_id (1 to 128) are required for the audit'
      using errcode = 'BS004',
            hint = 'Say why, and who you are: e.g. ''duplicates merged in the CRM'', ''ops:ivanov''.';
  end if;
end $$;
comment on function bitrix_sync._check_admin_audit(text, text) is
  'Internal: refuses an admin call without a reason (3 to 500 characters) or an operator id (BS004).';

create or replace function bitrix_sync._record_admin_action(
  p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text,
  p_reason text, p_operator_id text
) returns bigint
language sql as $$
  insert into bitrix_sync.admin_actions
    (action, workflow_id, rebind_request_id, decision, contact_id, reason, operator_id)
  values (p_action, p_workflow_id, p_rebind_request_id, p_decision, p_contact_id, btrim(p_reason),
          btrim(p_operator_id))
  returning id
$$;
comment on function bitrix_sync._record_admin_action(text, uuid, uuid, text, text, text, text) is
  'Internal: writes the audit row of an admin action (the database login is recorded by the column default).';

create or replace function bitrix_sync._abandon_workflow_commands(p_workflow_id uuid, p_code text)
returns integer
language plpgsql as $$
declare
  v_count integer;
  v_more integer;
begin
  perform bitrix_sync._check_code(p_code);
  -- Not sent yet: pending and retry_wait are abandoned; a leased one too, and the pump's send marker
  -- (send_commands, which wants it leased) then skips it. The caller refuses a write in flight.
  update bitrix_sync.crm_commands c
     set status = 'dead_letter', completed_at = now(), last_error_code = p_code,
         lease_token = null, locked_by = null, locked_until = null
   where c.workflow_id = p_workflow_id and c.alert_id is null
     and c.status in ('pending', 'retry_wait', 'leased');
  get diagnostics v_count = row_count;
  -- A write whose outcome is unknown stays recorded as such in the request's outcome; the command
  -- itself is closed through reconcile, the only way out of uncertain (§7.2).
  update bitrix_sync.crm_commands c set status = 'reconcile'
   where c.workflow_id = p_workflow_id and c.alert_id is null and c.status = 'uncertain';
  update bitrix_sync.crm_commands c
     set status = 'dead_letter', completed_at = now(), last_error_code = p_code
   where c.workflow_id = p_workflow_id and c.alert_id is null and c.status = 'reconcile';
  get diagnostics v_more = row_count;
  return v_count + v_more;
end $$;
comment on function bitrix_sync._abandon_workflow_commands(uuid, text) is
  'Internal (admin cancel): closes the unsent (pending, retry_wait, leased) and the unresolved (uncertain, reconcile) commands of a workflow as dead_letter with the code; no DLQ row. Returns how many.';

drop trigger if exists _200_forbid_delete on bitrix_sync.admin_actions;
create trigger _200_forbid_delete before delete on bitrix_sync.admin_actions
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.admin_actions is 'The admin audit is never deleted.';

-- Privileges: sql/privileges.sql (the admin role executes the functions and reads the views;
-- the runtime and the App have nothing here).
-- <<< sql/admin_common.sql
-- >>> sql/parked.sql (included)
-- Parked workflows (§9, docs/admin.md "Parked workflows"): a workflow in waiting_manual waits for a
-- person. The admin lists them with their reason, resumes one with a decision where the reason needs
-- one, or cancels it; every call is audited (sql/admin_common.sql) and every refusal says what to do.

create or replace function bitrix_sync._parked_decisions(p_reason text) returns text[]
language sql immutable parallel safe as $$
  -- Too many candidates (the portal's answer may miss the newest), or a person's link that could not
  -- be made: a person picks the Contact or asks for a new one. Anything else is retried once the
  -- data is fixed (the App's phone, the CRM's citizenship list, the duplicates merged in the CRM).
  select case when p_reason in ('too_many_candidates', 'manual_link_not_found', 'manual_link_bound_to_other_user')
              then array['retry', 'link_contact', 'create_contact']
              else array['retry'] end
$$;
comment on function bitrix_sync._parked_decisions(text) is
  'The decisions resume_parked_workflow accepts for a parking reason: retry always; link_contact and create_contact for too_many_candidates and a refused manual link.';

create or replace view bitrix_sync.parked_workflows as
select w.id as workflow_id, w.workflow_type, w.last_error_code as reason,
       w.updated_at as parked_at, extract(epoch from now() - w.updated_at)::bigint as parked_for_sec,
       a.alert_number, a.alert_type,
       bitrix_sync._parked_decisions(w.last_error_code) as decisions
  from bitrix_sync.workflow_instances w
  left join lateral (
    select b.alert_number, b.alert_type from bitrix_sync.business_alerts b
     where b.correlation_id = w.correlation_id and b.status = 'open'
     order by b.id desc limit 1
  ) a on true
 where w.state = 'waiting_manual';
comment on view bitrix_sync.parked_workflows is
  'Workflows parked in waiting_manual for a person: the reason code, since when, the open business alert raised with it (alert_number as shown in the smart-process item) and the decisions resume_parked_workflow accepts. No user or Contact IDs: the alert item in the CRM has the details.';

create or replace function bitrix_sync.resume_parked_workflow(
  p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text default null
) returns table (workflow_id uuid, state text, decision text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_wf bitrix_sync.workflow_instances;
  v_allowed text[];
  v_contact text := nullif(btrim(p_contact_id), '');
  v_manual jsonb;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  if p_decision is null or p_decision not in ('retry', 'link_contact', 'create_contact') then
    raise exception 'the decision must be retry, link_contact or create_contact'
      using errcode = 'BS004',
            hint = 'select decisions from bitrix_sync.parked_workflows where workflow_id = ''<id>'' lists the ones this workflow accepts.';
  end if;
  if p_decision = 'link_contact' and (v_contact is null or v_contact !~ '^[1-9][0-9]{0,17}$') then
    raise exception 'link_contact needs the Contact ID to link (digits only)'
      using errcode = 'BS004',
            hint = 'Pass it last: resume_parked_workflow(''<workflow id>'', ''link_contact'', ''<why>'', ''ops:<you>'', ''12345'').';
  end if;
  if p_decision <> 'link_contact' and v_contact is not null then
    raise exception 'only link_contact takes a Contact ID'
      using errcode = 'BS004', hint = 'Leave p_contact_id out for retry and create_contact.';
  end if;

  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found then
    raise exception 'there is no workflow %', p_workflow_id
      using errcode = 'BS005', hint = 'Copy the id from select * from bitrix_sync.parked_workflows.';
  end if;
  if v_wf.state <> 'waiting_manual' then
    raise exception 'workflow % is %, not parked', p_workflow_id, v_wf.state
      using errcode = 'BS002',
            hint = 'Only a workflow in waiting_manual waits for a decision; it may have been resumed by a newer App change already. select * from bitrix_sync.parked_workflows lists the parked ones.';
  end if;
  v_allowed := bitrix_sync._parked_decisions(v_wf.last_error_code);
  if not (p_decision = any (v_allowed)) then
    raise exception 'decision % does not apply to a workflow parked for %', p_decision, v_wf.last_error_code
      using errcode = 'BS004',
            hint = format('For %s use %s. Fix the data first (docs/admin.md, Parked workflows), then retry.',
                          v_wf.last_error_code, array_to_string(v_allowed, ' or '));
  end if;
  if p_decision = 'link_contact' and exists (
       select 1 from bitrix_sync.entity_external_mapping m
        where m.external_entity_type = 'contact' and m.external_id = v_contact and m.status = 'active'
          and m.entity_id <> v_wf.user_id) then
    raise exception 'that Contact is actively linked to another user'
      using errcode = 'BS006',
            hint = 'Pick another Contact, or create_contact; a Contact serves one active user. Resolve the other user''s link first if this Contact is really this user''s.';
  end if;

  -- A new pass of the workflow's intent, from its first step, with the person's decision in its step
  -- data (src/workflows/step/map-or-create.ts reads step_data.manual).
  v_manual := case p_decision when 'retry' then null
                              else jsonb_strip_nulls(jsonb_build_object('decision', p_decision, 'contact_id', v_contact)) end;
  v_wf := bitrix_sync.fire_workflow_event(
            p_workflow_id, null, 'manual_resume',
            jsonb_build_object(
              'current_step', 'start',
              'next_attempt_at', now(),
              'step_data', jsonb_strip_nulls(jsonb_build_object('pass', v_wf.revision, 'as', v_wf.intent_type,
                                                                'manual', v_manual))));
  perform bitrix_sync._record_admin_action('resume_workflow', p_workflow_id, null, p_decision, v_contact,
                                           p_reason, p_operator_id);
  return query select v_wf.id, v_wf.state::text, p_decision;
end $$;
comment on function bitrix_sync.resume_parked_workflow(uuid, text, text, text, text) is
  'Admin (docs/admin.md): waiting_manual -> running (manual_resume) for a new pass of the workflow, with a decision: retry (the data was fixed), link_contact (with p_contact_id: link this Contact) or create_contact (too_many_candidates and refused manual links). Audited. BS004 for a missing audit field or a decision that does not apply, BS005 unknown workflow, BS002 not parked, BS006 the Contact is linked to another active user.';

create or replace function bitrix_sync.cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text)
returns table (workflow_id uuid, state text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_wf bitrix_sync.workflow_instances;
  v_request uuid;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found then
    raise exception 'there is no workflow %', p_workflow_id
      using errcode = 'BS005', hint = 'Copy the id from select * from bitrix_sync.parked_workflows.';
  end if;
  if v_wf.workflow_type = 'contact.rebind' then
    select r.id into v_request from bitrix_sync.rebind_requests r where r.workflow_id = p_workflow_id;
    raise exception 'workflow % carries a rebind request', p_workflow_id
      using errcode = 'BS004',
            hint = format('Cancel the request instead, which records what the CRM holds: select * from bitrix_sync.cancel_rebind_request(%L, ''<why>'', ''ops:<you>'');', v_request);
  end if;
  if v_wf.state <> 'waiting_manual' then
    raise exception 'workflow % is %, not parked', p_workflow_id, v_wf.state
      using errcode = 'BS002',
            hint = 'Only a workflow in waiting_manual is cancelled here; a running one finishes on its own. select * from bitrix_sync.parked_workflows lists the parked ones.';
  end if;
  perform bitrix_sync._abandon_workflow_commands(p_workflow_id, 'cancelled_by_admin');
  -- The reason it parked stays in last_error_code; the outcome says a person ended it.
  v_wf := bitrix_sync.fire_workflow_event(p_workflow_id, null, 'cancel',
                                          jsonb_build_object('outcome', 'cancelled_by_admin'));
  perform bitrix_sync._record_admin_action('cancel_workflow', p_workflow_id, null, null, null, p_reason, p_operator_id);
  return query select v_wf.id, v_wf.state::text;
end $$;
comment on function bitrix_sync.cancel_parked_workflow(uuid, text, text) is
  'Admin (docs/admin.md): waiting_manual -> cancelled (outcome cancelled_by_admin), audited. The user''s next App change starts a new workflow. BS004 missing audit field or a rebind''s workflow (cancel_rebind_request), BS005 unknown workflow, BS002 not parked.';

-- Privileges: sql/privileges.sql (the admin role executes the functions and reads the views;
-- the runtime and the App have nothing here).
-- <<< sql/parked.sql
-- >>> sql/rebind_admin.sql (included)
-- Rebind requests for the admin (§5.4, docs/admin.md "Rebind"): watch a request without reading
-- personal data, and cancel an open one with a reason. A cancel stops its workflow and records what
-- the CRM already holds in the request's outcome: the CRM is never left changed without a record.

create or replace view bitrix_sync.rebind_request_status as
select r.id as request_id, r.status, r.failure_code, r.outcome, r.operator_id, r.requested_at, r.completed_at,
       r.cancelled_by, w.id as workflow_id, w.state as workflow_state, w.current_step,
       w.last_error_code as workflow_error_code, w.held_intent_type,
       extract(epoch from coalesce(r.completed_at, now()) - r.requested_at)::bigint as age_sec
  from bitrix_sync.rebind_requests r
  left join bitrix_sync.workflow_instances w on w.id = r.workflow_id;
comment on view bitrix_sync.rebind_request_status is
  'Rebind requests as an admin watches them: status, failure code, what the CRM holds (outcome), who asked, and where the workflow is (state, step, error code, an App change held until it ends). No user or Contact IDs and no reason text.';

create or replace function bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text)
returns table (request_id uuid, status text, outcome text, workflow_id uuid, workflow_state text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_req bitrix_sync.rebind_requests;
  v_wf bitrix_sync.workflow_instances;
  v_outcome text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_req from bitrix_sync.rebind_requests r where r.id = p_request_id for update;
  if not found then
    raise exception 'there is no rebind request %', p_request_id
      using errcode = 'BS005',
            hint = 'The id is what request_bitrix_contact_rebind returned; open ones: select * from bitrix_sync.rebind_request_status where status in (''requested'', ''in_progress'').';
  end if;
  if v_req.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is already %', p_request_id, v_req.status
      using errcode = 'BS002',
            hint = 'A finished request stays finished; its outcome column says what the CRM holds.';
  end if;
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = v_req.workflow_id for update;
  -- A write on its way to the portal has no known outcome yet: wait for its reply (or for its lease
  -- to expire, which records it as uncertain) so that the outcome recorded below is exact.
  perform 1 from bitrix_sync.crm_commands c
   where c.workflow_id = v_req.workflow_id and c.alert_id is null and c.status = 'in_flight'
     and bitrix_sync._is_write_command(c.command_type)
   for update;
  if found then
    raise exception 'a CRM write of rebind request % is on its way to the portal right now', p_request_id
      using errcode = 'BS007',
            hint = 'Try again in a few seconds: once its reply (or its lease expiry) is recorded, the cancel records exactly what the CRM holds.';
  end if;

  perform bitrix_sync._abandon_workflow_commands(v_req.workflow_id, 'rebind_cancelled');
  v_outcome := bitrix_sync._rebind_crm_outcome(v_req.workflow_id);
  update bitrix_sync.rebind_requests r
     set status = 'cancelled', outcome = v_outcome, cancel_reason = btrim(p_reason),
         cancelled_by = btrim(p_operator_id), completed_at = now()
   where r.id = p_request_id
  returning * into v_req;
  -- The workflow stops here, whoever holds its lease: a step still running is refused at its next
  -- fenced call (BS001). An App change held during the rebind starts now, on the old link.
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    update bitrix_sync.workflow_instances w
       set state = 'cancelled', outcome = 'rebind_cancelled', lease_token = null, locked_by = null,
           locked_until = null, finished_at = now()
     where w.id = v_wf.id
    returning * into v_wf;
  end if;
  perform bitrix_sync._record_admin_action('cancel_rebind_request', v_wf.id, p_request_id, null, null,
                                           p_reason, p_operator_id);
  if v_outcome <> 'crm_unchanged' then
    raise notice 'the CRM was already changed: %', v_outcome
      using hint = 'docs/admin.md (Rebind, outcomes) says what each outcome leaves in the CRM and what to check there.';
  end if;
  return query select v_req.id, v_req.status::text, v_req.outcome::text, v_wf.id, v_wf.state::text;
end $$;
comment on function bitrix_sync.cancel_rebind_request(uuid, text, text) is
  'Admin (docs/admin.md): requested | in_progress -> cancelled with the operator''s reason, audited. Closes the workflow''s unsent and unresolved commands, cancels the workflow (a held App change then starts) and records in outcome what the CRM already holds. BS004 missing audit field, BS005 unknown request, BS002 already finished, BS007 a write is in flight right now.';

-- Privileges: sql/privileges.sql (the admin role executes the functions and reads the views;
-- the runtime and the App have nothing here).
-- <<< sql/rebind_admin.sql

-- Requests left open by a workflow that already finished (the paths that did not close them before
-- this migration) are closed now, as the trigger closes them from here on.
select bitrix_sync._close_rebind_request(w)
  from bitrix_sync.workflow_instances w
  join bitrix_sync.rebind_requests r on r.workflow_id = w.id
 where r.status in ('requested', 'in_progress') and w.state in ('succeeded', 'failed', 'cancelled');
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
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id)',
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
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
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

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),

  -- runtime functions: the receivers
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement.'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
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
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
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
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  -- runtime functions: inbox processing, mapping, snapshots, alerts, rebind workflow, reconciliation
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
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
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.'),
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.'),
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.'),

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
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
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
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
