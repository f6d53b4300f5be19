-- Metrics (issue 12, §15): the database half of /metrics. State transitions of workflows and
-- commands, coalesced webhooks and new dead letters are counted where they happen, by triggers that
-- append to bitrix_sync.metric_events; bitrix_sync.metrics_snapshot() folds them into
-- bitrix_sync.metric_event_totals and returns every database-derived sample in one call
-- (sql/metrics.sql). The CRM staleness after which readiness says degraded becomes the hot setting
-- health.crm_stale_sec (sql/settings.sql).
set local lock_timeout = '10s';

-- Append-only: one row per counted event, written by the triggers in the transaction that makes
-- the change, deleted when a scrape folds it into the totals. No index: nothing looks a row up.
create table if not exists bitrix_sync.metric_events (
  machine varchar(16) not null check (machine in ('workflow', 'command', 'webhook', 'dead_letter')),
  kind varchar(64) not null,
  from_state varchar(32) not null,
  to_state varchar(32) not null
);
comment on table bitrix_sync.metric_events is
  'Counted events not yet folded into metric_event_totals: one row per workflow or command transition, coalesced webhook or new dead letter, appended by the _900 triggers. Types, states and sources only.';
comment on column bitrix_sync.metric_events.kind is
  'workflow_type, command_type, receiver or dead-letter source: a label value of low cardinality.';

create table if not exists bitrix_sync.metric_event_totals (
  machine varchar(16) not null check (machine in ('workflow', 'command', 'webhook', 'dead_letter')),
  kind varchar(64) not null,
  from_state varchar(32) not null,
  to_state varchar(32) not null,
  count bigint not null check (count >= 0),
  primary key (machine, kind, from_state, to_state)
);
comment on table bitrix_sync.metric_event_totals is
  'Running totals of the counted events since the table was created, folded from metric_events by metrics_snapshot(): the values of the bitrix_sync_*_total counters every replica exports.';

-- #include sql/settings.sql
-- #include sql/metrics.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
