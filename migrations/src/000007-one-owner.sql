-- One owner for each decision (issue 9): SQL alone decides when retrying stops, from each row's
-- stored first attempt and the active retry.horizon_sec (sql/retry.sql); every state change the
-- service made with its own UPDATE or INSERT goes through a guarded function (workflow step data,
-- rebind requests, alert mirroring, snapshots and CRM-master writes, reconciliation runs); the
-- reconciliation lease window becomes the hot setting reconcile.lease_sec.
set local lock_timeout = '10s';

-- #include sql/settings.sql
-- #include sql/retry.sql

-- A command's horizon starts at its first send; sent_at is overwritten by every send.
alter table bitrix_sync.crm_commands add column if not exists first_sent_at timestamptz;
comment on column bitrix_sync.crm_commands.first_sent_at is
  'When the command was first sent: its retry horizon starts here (a command never sent counts from created_at).';
-- Commands sent before this migration stamped only deadline_at = first send + the horizon then
-- active. Only the rows that may still be retried need their first send back.
update bitrix_sync.crm_commands
   set first_sent_at = deadline_at
                       - make_interval(secs => (bitrix_sync._active_setting('retry.horizon_sec') #>> '{}')::double precision)
 where first_sent_at is null and attempt_count > 0 and status in ('leased', 'in_flight', 'retry_wait');

-- The stored deadlines follow the setting instead of a fixed 24 hours.
alter table bitrix_sync.crm_commands alter column deadline_at set default bitrix_sync._retry_deadline(now());
alter table bitrix_sync.workflow_instances alter column deadline_at set default bitrix_sync._retry_deadline(now());
comment on column bitrix_sync.crm_commands.deadline_at is
  'Retry horizon: first send + retry.horizon_sec (§9), as of the last retry decision. retry_command decides from first_sent_at and the active setting.';
comment on column bitrix_sync.workflow_instances.deadline_at is
  'Retry horizon: created_at + retry.horizon_sec (§9), as of the last retry decision. schedule_workflow_retry decides from created_at and the active setting.';

alter table bitrix_sync.reconciliation_cursors add column if not exists lease_token uuid;
comment on column bitrix_sync.reconciliation_cursors.lease_token is
  'Fencing token of the running run (claim_reconciliation_cursor); only its holder can finish or fail the run.';

-- #include sql/queue.sql
-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/webhooks.sql
-- #include sql/alerts.sql
-- #include sql/rebind.sql
-- #include sql/snapshots.sql
-- #include sql/reconciliation.sql
-- #include sql/status.sql
-- #include sql/grants.sql
