-- Row guards beyond the state edges (§6.3, §5.4, §12.3, §17; issue 10): a row is born in its
-- machine's initial state. Triggers, so they hold for every writer: the runtime role (whose
-- grants already leave the state columns out of its inserts), the admin functions and the schema
-- owner's own accidents. Tests and repairs that must start a row elsewhere turn triggers off
-- explicitly (session_replication_role = replica, superuser only).
-- TG_ARGV[0]: the initial state in words. The trigger's WHEN clause decides; this only reports.

create or replace function bitrix_sync.tg__refuse_insert_state() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
-- TG_ARGV[0]: the initial state in words. The trigger's WHEN clause decides; this only reports.
begin
  raise exception 'a new row of %.% must start %', tg_table_schema, tg_table_name, tg_argv[0]
    using errcode = 'BS030',
          hint = 'Create rows through their bitrix_sync function; they move on only along bitrix_sync.state_edges (docs/state-machines.md).';
end $$;
comment on function bitrix_sync.tg__refuse_insert_state() is
  'BEFORE INSERT guard, fired by its WHEN clause when a row is inserted in a state other than its machine''s initial one (or already leased or finished). SQLSTATE BS030.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- Initial states (the [*] arrows of docs/state-machines.md). WHEN keeps the hot inserts (inbox,
-- commands, queue) free of a PL/pgSQL call.
drop trigger if exists _110_initial_state on han_app.sync_queue;
create trigger _110_initial_state before insert on han_app.sync_queue
  for each row when (new.status <> 'pending' or new.lease_token is not null or new.completed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('pending, without a lease');
comment on trigger _110_initial_state on han_app.sync_queue is 'Intents are recorded pending (§6.1).';

drop trigger if exists _110_initial_state on bitrix_sync.workflow_instances;
create trigger _110_initial_state before insert on bitrix_sync.workflow_instances
  for each row when (new.state <> 'created' or new.lease_token is not null or new.finished_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('created, without a lease');
comment on trigger _110_initial_state on bitrix_sync.workflow_instances is 'Workflows start created (§7.1).';

drop trigger if exists _110_initial_state on bitrix_sync.crm_commands;
create trigger _110_initial_state before insert on bitrix_sync.crm_commands
  for each row when (new.status <> 'pending' or new.lease_token is not null or new.sent_at is not null
                     or new.completed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('pending, never sent, without a lease');
comment on trigger _110_initial_state on bitrix_sync.crm_commands is 'Commands are issued pending (§7.2).';

drop trigger if exists _110_initial_state on bitrix_sync.webhook_inbox;
create trigger _110_initial_state before insert on bitrix_sync.webhook_inbox
  for each row when (new.status <> 'received' or new.lease_token is not null or new.coalesced_into is not null
                     or new.processed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('received, without a lease');
comment on trigger _110_initial_state on bitrix_sync.webhook_inbox is 'Webhooks are recorded received (§7.3).';

drop trigger if exists _110_initial_state on bitrix_sync.entity_external_mapping;
create trigger _110_initial_state before insert on bitrix_sync.entity_external_mapping
  for each row when (new.status <> 'active')
  execute function bitrix_sync.tg__refuse_insert_state('active');
comment on trigger _110_initial_state on bitrix_sync.entity_external_mapping is 'A link is opened active; it is closed or broken only by close_mapping (§6.3).';

drop trigger if exists _110_initial_state on bitrix_sync.rebind_requests;
create trigger _110_initial_state before insert on bitrix_sync.rebind_requests
  for each row when (new.status <> 'requested' or new.completed_at is not null or new.failure_code is not null)
  execute function bitrix_sync.tg__refuse_insert_state('requested');
comment on trigger _110_initial_state on bitrix_sync.rebind_requests is 'Rebind requests start requested (§5.4).';

drop trigger if exists _110_initial_state on bitrix_sync.business_alerts;
create trigger _110_initial_state before insert on bitrix_sync.business_alerts
  for each row when (new.status <> 'open' or new.crm_sync_status <> 'pending' or new.closed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('open, with its CRM mirror pending');
comment on trigger _110_initial_state on bitrix_sync.business_alerts is 'Alerts open, and are mirrored into the CRM afterwards (§11).';

drop trigger if exists _110_initial_state on bitrix_sync.settings_versions;
create trigger _110_initial_state before insert on bitrix_sync.settings_versions
  for each row when (new.status <> 'draft' or new.validation_errors is not null or new.validated_at is not null
                     or new.activated_by is not null or new.activated_at is not null or new.superseded_at is not null
                     or new.validated_db_user is not null or new.activated_db_user is not null)
  execute function bitrix_sync.tg__refuse_insert_state('draft, neither validated nor activated');
comment on trigger _110_initial_state on bitrix_sync.settings_versions is 'A settings version starts as a draft and is validated before it can be activated (§12.3).';
