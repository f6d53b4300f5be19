-- One guard trigger per table with a state column (§6.1, §7.1, §7.2, §7.3, §6.3): an UPDATE of
-- the state that is not an edge of bitrix_sync.state_edges is refused, whoever writes it.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
