-- The privilege decisions (sql/privileges/) on the tables and sequences of reconciliation/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token, failed_runs, retry_at)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.reconciliation_spikes', array[]::text[], array[]::text[], array[]::text[],
   'Reconciliation runs with a recovered-without-webhook spike, written by record_recovered_spike (security definer); the admin reads them through status_recovered_spikes.'),
  ('sequence', 'bitrix_sync.reconciliation_spikes_id_seq', array[]::text[], array[]::text[], array[]::text[],
   'Identity of reconciliation_spikes.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
