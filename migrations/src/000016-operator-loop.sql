-- The operator's loop (issue 11): technical dead letters an admin can acknowledge or requeue,
-- alert mirroring that retries and looks an unanswered add up before adding again, retention of
-- finished rows, readiness on sub-command permission errors, and status views that read only live
-- rows through partial indexes however long the history is.
set local lock_timeout = '10s';

------------------------------------------------------------------------------------------------
-- Dead letters: how each one was resolved, by whom and why (sql/dead_letters.sql).
------------------------------------------------------------------------------------------------
alter table bitrix_sync.technical_dead_letters
  add column if not exists resolution varchar(16),
  add column if not exists resolution_reason text,
  add column if not exists requeued_to varchar(80);
-- Nothing resolved a dead letter before this migration, so every row passes; the table holds
-- failures only (hundreds of rows, not millions) and the check validates in this transaction.
alter table bitrix_sync.technical_dead_letters drop constraint if exists technical_dead_letters_resolution_check;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.technical_dead_letters add constraint technical_dead_letters_resolution_check
  check ((resolution is null and resolved_at is null and resolved_by is null and resolution_reason is null
          and requeued_to is null)
         or (resolution in ('acknowledged', 'requeued') and resolved_at is not null and resolved_by is not null
             and length(btrim(resolution_reason)) between 3 and 500
             and (resolution = 'requeued') = (requeued_to is not null)));
comment on column bitrix_sync.technical_dead_letters.resolved_at is 'When an admin acknowledged or requeued it; null while open.';
comment on column bitrix_sync.technical_dead_letters.resolved_by is 'Operator identifier given to acknowledge_dead_letter() or requeue_dead_letter().';
comment on column bitrix_sync.technical_dead_letters.resolution is 'acknowledged (looked at, nothing re-sent) | requeued (a new attempt was started).';
comment on column bitrix_sync.technical_dead_letters.resolution_reason is 'The operator''s reason, written by an admin (3 to 500 characters).';
comment on column bitrix_sync.technical_dead_letters.requeued_to is 'What carries the new attempt: sync_queue:<id>, webhook:<id>, workflow:<id> or alert:<id>.';

-- The admin audit names the dead letter an acknowledge or requeue resolved. No foreign key: like
-- workflow_id, it is a reference for reading, and dead letters are never deleted.
alter table bitrix_sync.admin_actions add column if not exists dead_letter_id bigint;
comment on column bitrix_sync.admin_actions.dead_letter_id is
  'The technical dead letter an acknowledge_dead_letter or requeue_dead_letter resolved.';
comment on column bitrix_sync.admin_actions.action is
  'resume_workflow, cancel_workflow, cancel_rebind_request, acknowledge_dead_letter, requeue_dead_letter, ...';

------------------------------------------------------------------------------------------------
-- A requeued workflow starts over with a retry horizon of its own (sql/workflows.sql).
------------------------------------------------------------------------------------------------
alter table bitrix_sync.workflow_instances add column if not exists requeued_at timestamptz;
comment on column bitrix_sync.workflow_instances.requeued_at is
  'When an admin last requeued the failed workflow (requeue_dead_letter); its retry horizon counts from here instead of created_at.';

------------------------------------------------------------------------------------------------
-- Live rows through partial indexes: the status views, the metrics and the sync loop read only
-- unfinished rows, retention finds finished ones by age, and deleting a row finds what refers to it
-- without a scan. These tables are written by the service, not by the App; each index is built in
-- this transaction under the lock_timeout above.
------------------------------------------------------------------------------------------------
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_commands_live_idx on bitrix_sync.crm_commands (command_type, status)
  where status <> 'succeeded';
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_commands_alert_idx on bitrix_sync.crm_commands (alert_id, id)
  where alert_id is not null;
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_commands_completed_idx on bitrix_sync.crm_commands (completed_at)
  where completed_at is not null;
comment on index bitrix_sync.crm_commands_live_idx is 'status_commands and the pump read unfinished and dead-lettered commands only.';
comment on index bitrix_sync.crm_commands_alert_idx is 'The commands of one business alert (mirroring, lookups, requeue).';
comment on index bitrix_sync.crm_commands_completed_idx is 'Retention: finished commands by age.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_live_idx on bitrix_sync.webhook_inbox (receiver, status)
  where status <> 'processed';
-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_coalesced_into_idx on bitrix_sync.webhook_inbox (coalesced_into)
  where coalesced_into is not null;
-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_processed_idx on bitrix_sync.webhook_inbox (processed_at)
  where status = 'processed';
comment on index bitrix_sync.webhook_inbox_live_idx is 'status_webhooks reads unprocessed rows only.';
comment on index bitrix_sync.webhook_inbox_coalesced_into_idx is 'The events coalesced into one (complete_webhook, and the foreign key check when retention deletes).';
comment on index bitrix_sync.webhook_inbox_processed_idx is 'Retention: processed events by age.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists workflow_instances_finished_idx on bitrix_sync.workflow_instances (finished_at)
  where state in ('succeeded', 'failed', 'cancelled');
comment on index bitrix_sync.workflow_instances_finished_idx is 'Retention: finished workflows by age.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists business_alerts_unmirrored_idx on bitrix_sync.business_alerts (id)
  where crm_sync_status <> 'synced';
comment on index bitrix_sync.business_alerts_unmirrored_idx is 'Alerts whose smart-process item is behind (mirroring, status_alert_mirror); alerts are never deleted.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists entity_external_mapping_workflow_idx on bitrix_sync.entity_external_mapping (workflow_id)
  where workflow_id is not null;
-- squawk-ignore require-concurrent-index-creation
create index if not exists rebind_requests_workflow_idx on bitrix_sync.rebind_requests (workflow_id)
  where workflow_id is not null;
comment on index bitrix_sync.entity_external_mapping_workflow_idx is 'Retention keeps the workflows that opened or closed a mapping (its audit).';
comment on index bitrix_sync.rebind_requests_workflow_idx is 'Retention keeps the workflows of rebind requests (their audit, and the foreign key).';

-- #include sql/settings.sql
-- #include sql/state_machines.sql
-- #include sql/workflows.sql
-- #include sql/status.sql
-- #include sql/alert_mirror.sql
-- #include sql/dead_letters.sql
-- #include sql/retention.sql
-- #include sql/metrics.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
