-- Metrics (§15): the counting of state transitions where they happen, in the transaction that
-- makes them. Most transitions happen inside SQL (claims, the wake-up of a workflow when its
-- command completes, coalescing, dead-lettering), where no lane sees the old state. An AFTER
-- trigger appends one row per transition to bitrix_sync.metric_events; nothing is updated in place,
-- so two writers never wait on each other and a rolled-back transition is never counted.
-- metrics_snapshot() (sql/metrics/snapshot.sql) folds the appended rows into
-- bitrix_sync.metric_event_totals, so the counters survive restarts and every replica reports the
-- same totals.
-- metric_events has no constraint (000048: its CHECK on machine was compiled for every counted
-- transition): these triggers are its only writers, each with its machine as a literal, which
-- test/integration/checks-when-written.test.ts checks against metric_event_totals' rule.

create or replace function bitrix_sync.tg_workflow_instances__count_transition() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('workflow', new.workflow_type, old.state, new.state);
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__count_transition() is
  'AFTER UPDATE OF state trigger: appends one workflow transition (type, from, to) to metric_events for bitrix_sync_workflow_transitions_total. Security definer: whoever moves the workflow, nobody needs rights on the table.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_workflow_instances__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _900_count_transition on bitrix_sync.workflow_instances;
create trigger _900_count_transition after update of state on bitrix_sync.workflow_instances
  for each row when (old.state is distinct from new.state)
  execute function bitrix_sync.tg_workflow_instances__count_transition();
comment on trigger _900_count_transition on bitrix_sync.workflow_instances is
  'Counts each committed workflow transition for /metrics (bitrix_sync.metric_events).';

-- Commands count per statement (issue 36): every command transition of the engine's hot path is
-- one statement for a whole batch (claim_commands, send_commands, complete_commands move 50 rows),
-- so one trigger call and one insert stand where a row-level trigger ran once per row. A trigger
-- with transition tables cannot name its columns, so it fires for every UPDATE of the table and
-- pairs the old and new rows by primary key; one that moved no status inserts nothing. Workflows
-- keep a row-level trigger: most of their transitions are single-row statements (a step's own
-- transition), where a transition-table trigger costs several times a row-level one.
create or replace function bitrix_sync.tg_crm_commands__count_transition() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  select 'command', n.command_type, o.status, n.status
    from bitrix_sync_new_rows n join bitrix_sync_old_rows o on o.id = n.id
   where o.status is distinct from n.status;
  return null;
end $$;
comment on function bitrix_sync.tg_crm_commands__count_transition() is
  'AFTER UPDATE statement trigger (transition tables bitrix_sync_old_rows, bitrix_sync_new_rows): appends one row per command transition of the statement (type, from, to) to metric_events for bitrix_sync_command_transitions_total, in one insert.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_crm_commands__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _900_count_transition on bitrix_sync.crm_commands;
create trigger _900_count_transition after update on bitrix_sync.crm_commands
  referencing old table as bitrix_sync_old_rows new table as bitrix_sync_new_rows
  for each statement execute function bitrix_sync.tg_crm_commands__count_transition();
comment on trigger _900_count_transition on bitrix_sync.crm_commands is
  'Counts the committed command transitions of each UPDATE statement for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.tg_webhook_inbox__count_coalesced() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('webhook', new.receiver, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_webhook_inbox__count_coalesced() is
  'AFTER UPDATE OF status trigger: appends one event coalesced into another (claim_webhooks) to metric_events for bitrix_sync_webhook_coalesced_total.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_webhook_inbox__count_coalesced()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _900_count_coalesced on bitrix_sync.webhook_inbox;
create trigger _900_count_coalesced after update of status on bitrix_sync.webhook_inbox
  for each row when (new.status = 'coalesced' and old.status is distinct from new.status)
  execute function bitrix_sync.tg_webhook_inbox__count_coalesced();
comment on trigger _900_count_coalesced on bitrix_sync.webhook_inbox is
  'Counts webhook events covered by another event''s read (received -> coalesced) for /metrics.';

create or replace function bitrix_sync.tg_technical_dead_letters__count() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('dead_letter', new.source, '', 'dead_letter');
  return null;
end $$;
comment on function bitrix_sync.tg_technical_dead_letters__count() is
  'AFTER INSERT trigger: appends one new technical dead letter (by source) to metric_events for bitrix_sync_dead_letters_total.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_technical_dead_letters__count()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _900_count_dead_letter on bitrix_sync.technical_dead_letters;
create trigger _900_count_dead_letter after insert on bitrix_sync.technical_dead_letters
  for each row execute function bitrix_sync.tg_technical_dead_letters__count();
comment on trigger _900_count_dead_letter on bitrix_sync.technical_dead_letters is
  'Counts each new technical dead letter for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.tg_business_alerts__count_remote_missing() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('alert', new.alert_type, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_business_alerts__count_remote_missing() is
  'AFTER UPDATE OF status trigger: appends one alert whose smart-process item was found deleted (open -> remote_missing, §10.3) to metric_events for bitrix_sync_business_alerts_remote_missing_total.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_business_alerts__count_remote_missing()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _900_count_remote_missing on bitrix_sync.business_alerts;
create trigger _900_count_remote_missing after update of status on bitrix_sync.business_alerts
  for each row when (new.status = 'remote_missing' and old.status is distinct from new.status)
  execute function bitrix_sync.tg_business_alerts__count_remote_missing();
comment on trigger _900_count_remote_missing on bitrix_sync.business_alerts is
  'Counts each alert whose smart-process item was deleted in the CRM (remote_missing) for /metrics (bitrix_sync.metric_events).';
