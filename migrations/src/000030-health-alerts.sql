-- What tells an operator that something failed silently (docs/runbook.md, docs/observability.md):
--
-- - reconciliation_cursors.failed_runs and retry_at: a failed run is due again after its backoff
--   (fail_reconciliation_run takes the delay), not after a whole interval, and a run that keeps
--   failing shows (bitrix_sync_reconciliation_failed_runs);
-- - metric_events counts alerts whose smart-process item was deleted (machine 'alert',
--   bitrix_sync_business_alerts_remote_missing_total), and metrics_snapshot() exports the failed
--   runs, the reconciliation intervals, how long alerts have waited for the smart process and
--   whether they go there at all;
-- - the alert smart process's settings are validated across keys (_alert_settings_errors): terminal
--   stages distinct from each other and from the open ones, field names that are smart-process
--   fields, one each, and, while alerts go to the CRM, every stage and item field the mirror needs;
--   the new key alerts.database_only keeps alerts in the database on purpose.
--
-- The active settings version must pass the new alert rules, or the migration stops (BS094) and
-- changes nothing: the service would otherwise refuse that version at its next start.
set local lock_timeout = '10s';

alter table bitrix_sync.reconciliation_cursors
  add column if not exists failed_runs integer not null default 0,
  add column if not exists retry_at timestamptz;
-- A handful of rows (one per job type), all 0 now: nothing to validate at leisure.
alter table bitrix_sync.reconciliation_cursors
  -- squawk-ignore constraint-missing-not-valid
  add constraint reconciliation_cursors_failed_runs_check check (failed_runs >= 0);
comment on column bitrix_sync.reconciliation_cursors.failed_runs is
  'Runs that failed since the last successful one (a run given back at shutdown does not count); 0 after a success.';
comment on column bitrix_sync.reconciliation_cursors.retry_at is
  'When a failed run is due again (its backoff); the interval since the last start still applies when it is later.';

-- One more counted machine: business alerts whose item was deleted in the CRM (remote_missing).
-- Both tables hold a few rows (metric_events is folded at every scrape, the totals one per series),
-- and each new CHECK admits more than the one it replaces.
alter table bitrix_sync.metric_events
  drop constraint metric_events_machine_check,
  -- squawk-ignore constraint-missing-not-valid
  add constraint metric_events_machine_check
    check (machine in ('workflow', 'command', 'webhook', 'dead_letter', 'alert'));
alter table bitrix_sync.metric_event_totals
  drop constraint metric_event_totals_machine_check,
  -- squawk-ignore constraint-missing-not-valid
  add constraint metric_event_totals_machine_check
    check (machine in ('workflow', 'command', 'webhook', 'dead_letter', 'alert'));

-- #include sql/settings.sql

do $$
declare
  v_errors text;
begin
  select string_agg(e, '; ') into v_errors
    from jsonb_array_elements_text(bitrix_sync._alert_settings_errors(
           (select v.settings_values from bitrix_sync.settings_versions v where v.status = 'active'))) e;
  if v_errors is not null then
    raise exception 'migration 000030 stopped: the active settings version has alert settings that are now refused: %', v_errors
      using errcode = 'BS094',
            hint = 'Nothing was changed. Activate a version with complete, distinct alert stages and every alerts.fields entry (or alerts.entity_type_id null), then run the migration again (docs/migrations.md).';
  end if;
end $$;

-- The retry delay is a new argument: the three-argument form is replaced, not overloaded (a caller
-- of the previous release passes three arguments and gets the default).
drop function if exists bitrix_sync.fail_reconciliation_run(text, uuid, text);
-- #include sql/reconciliation.sql
-- #include sql/metrics.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
