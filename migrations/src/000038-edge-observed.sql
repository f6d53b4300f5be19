-- The public edge, observed (docs/deployment.md, "The proxy's refusals"; docs/runbook.md,
-- BitrixSyncWebhookSourcesRefused, BitrixSyncWebhooksPossiblyLost).
--
-- 1. refused_sources: the journal of source addresses the public nginx refused (§10.1: time, source
--    IP, receiver route and outcome, bounded retention), written by record_refused_sources
--    (sql/webhooks/edge_refusals.sql, security definer) from what the service's internal refusal route
--    gathered; the admin reads status_refused_sources.
-- 2. reconciliation_spikes: the reconciliation runs that recovered a spike of Contacts without a
--    webhook (§10.2), written by the run under its lease (record_recovered_spike,
--    sql/reconciliation/spikes.sql) the moment it knows, and exported by metrics_snapshot
--    (sql/metrics/snapshot.sql) as bitrix_sync_reconciliation_recovered_spike_timestamp_seconds: the alert no
--    longer rests on one process's counter.
-- 3. contact_snapshots.last_webhook_source_at, there since 000002 and never written, is written by
--    apply_crm_master_fields (sql/snapshots/snapshots.sql) for a robot webhook's read, granted to the
--    runtime (sql/snapshots/tables.sql), and shown by explain_user (sql/admin/explain_user.sql).
--
-- Locks and time: two new, empty tables; the functions are replaced; the grants are applied again.
-- Nothing touches the App's tables or rewrites a row.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table if not exists bitrix_sync.refused_sources (
  source_ip inet not null check (masklen(source_ip) = case family(source_ip) when 4 then 32 else 128 end),
  receiver varchar(16) not null check (receiver in ('contact', 'alert', 'none')),
  refusals bigint not null check (refusals > 0),
  first_seen_at timestamptz not null,
  last_seen_at timestamptz not null,
  primary key (source_ip, receiver),
  constraint refused_sources_seen_order check (first_seen_at <= last_seen_at)
);
create index if not exists refused_sources_last_seen_idx on bitrix_sync.refused_sources (last_seen_at);
comment on table bitrix_sync.refused_sources is
  'Source addresses the public proxy refused for not being in BITRIX_WEBHOOK_ALLOWED_CIDRS (§10.1): per address and receiver route, how many refusals and when first and last. No query, body, header or token. Kept 30 days after the last refusal, at most 10 000 rows (record_refused_sources). For diagnosis and a reviewed allow-list change only; never read to admit anyone.';
comment on column bitrix_sync.refused_sources.source_ip is 'The TCP peer nginx refused (its $remote_addr), one address.';
comment on column bitrix_sync.refused_sources.receiver is 'contact or alert (the robot routes), none for any other path.';
comment on column bitrix_sync.refused_sources.refusals is 'Refusals of this address on this route since first_seen_at.';
comment on column bitrix_sync.refused_sources.first_seen_at is 'The first refusal (as the service received it from nginx).';
comment on column bitrix_sync.refused_sources.last_seen_at is 'The last refusal.';

create table if not exists bitrix_sync.reconciliation_spikes (
  id bigint generated always as identity primary key,
  job_type varchar(32) not null,
  run_started_at timestamptz not null,
  recorded_at timestamptz not null default now(),
  recovered integer not null check (recovered > 0),
  mapped integer not null check (mapped >= recovered),
  baseline double precision check (baseline >= 0)
);
comment on table bitrix_sync.reconciliation_spikes is
  'Reconciliation runs whose Contacts recovered without a webhook were a spike (§10.2; the decision is isRecoveredSpike in src/inbound/reconcile.ts), recorded by the run under its lease; the last 1 000.';
comment on column bitrix_sync.reconciliation_spikes.id is 'Identity, in recording order.';
comment on column bitrix_sync.reconciliation_spikes.job_type is 'The reconciliation job (contacts).';
comment on column bitrix_sync.reconciliation_spikes.run_started_at is 'When the run started (its claim).';
comment on column bitrix_sync.reconciliation_spikes.recorded_at is 'When the run found the spike: what bitrix_sync_reconciliation_recovered_spike_timestamp_seconds exports.';
comment on column bitrix_sync.reconciliation_spikes.recovered is 'Contacts the run recovered without a webhook.';
comment on column bitrix_sync.reconciliation_spikes.mapped is 'Changed linked Contacts the run read.';
comment on column bitrix_sync.reconciliation_spikes.baseline is 'The smoothed usual recovered count it was compared with (reconciliation_cursors.recovered_baseline before the run); null before the first successful run.';
comment on column bitrix_sync.contact_snapshots.last_webhook_source_at is
  'The CRM time (updatedTime) of the Contact as read for the last robot webhook applied; with last_webhook_received_at, when the robot called.';

-- #include sql/webhooks/edge_refusals.sql
-- #include sql/webhooks/tables.sql
-- #include sql/reconciliation/spikes.sql
-- #include sql/reconciliation/tables.sql
-- #include sql/snapshots/snapshots.sql
-- #include sql/snapshots/tables.sql
-- #include sql/metrics/snapshot.sql
-- #include sql/admin/explain_user.sql
select bitrix_sync.apply_privileges();
