-- Spikes of Contacts recovered without a webhook (§10.2: a spike of their number or share raises an
-- ops alert about lost webhooks; docs/workflows.md, "Reconciliation runs"). The run that finds one
-- records it here under its lease, before it finishes or fails, so the fact is in the database the
-- moment the run knows it: every replica's /metrics shows it at the next scrape
-- (bitrix_sync_reconciliation_recovered_spike_timestamp_seconds), whichever process ran, and a
-- restart does not lose it. Whether a run is a spike is decided once, in src/inbound/reconcile.ts
-- (isRecoveredSpike); this file only keeps it. At most the last 1 000 spikes are kept.

create or replace function bitrix_sync.record_recovered_spike(
  p_job_type text, p_lease_token uuid, p_recovered integer, p_mapped integer, p_baseline double precision
) returns bitrix_sync.reconciliation_spikes
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_started timestamptz;
  v_row bitrix_sync.reconciliation_spikes;
begin
  if p_recovered is null or p_recovered < 1 or p_mapped is null or p_mapped < p_recovered
     or p_baseline < 0 or p_baseline = 'NaN'::double precision then
    raise exception 'a spike has recovered >= 1 Contacts of mapped >= recovered, and a baseline >= 0 or null'
      using errcode = 'BS004', hint = 'Pass the run''s counts as src/inbound/reconcile.ts reports them.';
  end if;
  -- Only the run that holds the cursor records its spike (a run whose lease was taken over is stale).
  select r.last_run_started_at into v_started from bitrix_sync.reconciliation_cursors r
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  insert into bitrix_sync.reconciliation_spikes (job_type, run_started_at, recovered, mapped, baseline)
  values (p_job_type, v_started, p_recovered, p_mapped, p_baseline)
  returning * into v_row;
  delete from bitrix_sync.reconciliation_spikes s
   where s.id in (select k.id from bitrix_sync.reconciliation_spikes k order by k.id desc offset 1000);
  return v_row;
end $$;
comment on function bitrix_sync.record_recovered_spike(text, uuid, integer, integer, double precision) is
  'Records that the running reconciliation run of p_job_type (fenced by its lease token, BS001 otherwise) recovered a spike of Contacts without a webhook: how many, of how many changed linked Contacts, against which baseline. Keeps the last 1 000.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_recovered_spike(text,uuid,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Reconciliation: a run''s recovered-without-webhook spike, under its lease (security definer).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.reconciliation_spike_metrics()
returns table (family text, labels jsonb, value double precision)
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- Always present (0 before the first spike), so a rule on it needs no earlier sample.
  select 'bitrix_sync_reconciliation_recovered_spike_timestamp_seconds'::text, '{}'::jsonb,
         coalesce(extract(epoch from max(s.recorded_at)), 0)::double precision
    from bitrix_sync.reconciliation_spikes s where s.job_type = 'contacts';
$$;
comment on function bitrix_sync.reconciliation_spike_metrics() is
  'The spike sample of metrics_snapshot: when the last Contact reconciliation run with a recovered-without-webhook spike recorded it (Unix time, 0 before the first).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.reconciliation_spike_metrics()', array[]::text[], array[]::text[], array[]::text[],
   'Called by metrics_snapshot (security definer); not on its own.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_recovered_spikes as
select s.job_type, s.run_started_at, s.recorded_at, s.recovered, s.mapped, s.baseline
  from bitrix_sync.reconciliation_spikes s
 order by s.id desc;
comment on view bitrix_sync.status_recovered_spikes is
  'Reconciliation runs that recovered a spike of Contacts without a webhook (§10.2), newest first: when the run started, when it found the spike, how many it recovered of how many changed linked Contacts, and the usual value it was compared with (docs/runbook.md, BitrixSyncWebhooksPossiblyLost).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_recovered_spikes', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: the reconciliation runs that recovered a spike of Contacts without a webhook; counts only.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
