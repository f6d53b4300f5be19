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
    -- An admin requeues the technical dead letter that failed it (requeue_dead_letter): it starts over.
    ('workflow', 'failed', 'waiting_retry', 'requeue'),
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
language plpgsql set search_path = pg_catalog, pg_temp as $$
-- TG_ARGV[0]: machine name in state_edges; TG_ARGV[1]: the state column.
declare
  v_from text;
  v_to text;
begin
  -- The status column by name (issue 14): turning both whole rows into JSON on every transition cost
  -- more than the rest of the guard. Another column name takes the generic way.
  if tg_argv[1] = 'status' then
    v_from := old.status;
    v_to := new.status;
  else
    v_from := to_jsonb(old) ->> tg_argv[1];
    v_to := to_jsonb(new) ->> tg_argv[1];
  end if;
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
  'BEFORE UPDATE guard: refuses a change of the state column (TG_ARGV[1], read directly when it is status) that is not an edge of machine TG_ARGV[0] in bitrix_sync.state_edges. SQLSTATE BS002.';

create or replace function bitrix_sync.tg_workflow_instances__guard_state() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  -- tg__guard_transition for the one machine whose column is "state" (TG_ARGV as there), reading it
  -- directly.
  if old.state is distinct from new.state
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = old.state and e.to_state = new.state) then
    raise exception 'illegal % transition % -> %', tg_argv[0], old.state, new.state
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg_workflow_instances__guard_state() is
  'BEFORE UPDATE OF state guard of workflow_instances: refuses a change of state that is not an edge of machine TG_ARGV[0] (workflow) in bitrix_sync.state_edges. SQLSTATE BS002.';

create or replace function bitrix_sync.tg__forbid_delete() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
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
  for each row execute function bitrix_sync.tg_workflow_instances__guard_state('workflow', 'state');
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
