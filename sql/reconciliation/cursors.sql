-- Reconciliation runs (§10.2, §10.3): the cursor row of each job is its lock. A run is claimed when
-- it is due (the interval passed, or forced) and no other run holds the cursor; a run still marked
-- running after reconcile.lease_sec is taken to have died. The lease token fences the finish, and
-- the watermark moves only when a whole run succeeded. A failed run is due again at its retry_at
-- (the caller's backoff, src/crm/backoff.ts), never later than a whole interval after it started;
-- failed_runs counts the failures since the last success for the ops alert.

create or replace function bitrix_sync.claim_reconciliation_cursor(
  p_job_type text, p_interval interval, p_force boolean default false, p_overlap interval default null
) returns setof bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('reconcile.lease_sec') #>> '{}')::double precision);
begin
  if p_interval is null or p_interval < interval '0' or p_overlap < interval '0' then
    raise exception 'a reconciliation claim needs a non-negative interval (and overlap)'
      using errcode = 'BS004', hint = 'Check reconcile.contacts_interval_sec, alerts.reconcile_interval_sec and reconcile.overlap_sec.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  insert into bitrix_sync.reconciliation_cursors (job_type) values (p_job_type) on conflict do nothing;
  select * into v_row from bitrix_sync.reconciliation_cursors r
   where r.job_type = p_job_type for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= pg_catalog.now() - v_lease then
    return; -- a run is in progress
  end if;
  -- Due: the interval passed since the last start, or, after a failure, its backoff did.
  if not coalesce(p_force, false)
     and v_row.last_run_started_at > pg_catalog.now() - p_interval
     and not coalesce(v_row.last_run_status = 'failed' and v_row.retry_at <= pg_catalog.now(), false) then
    return; -- not due yet
  end if;
  update bitrix_sync.reconciliation_cursors r
     set last_run_started_at = pg_catalog.now(), last_run_status = 'running', lease_token = pg_catalog.gen_random_uuid(),
         overlap = coalesce(p_overlap, r.overlap), retry_at = null
   where r.job_type = p_job_type
  returning * into v_row;
  return next v_row;
end $$;
comment on function bitrix_sync.claim_reconciliation_cursor(text, interval, boolean, interval) is
  'Starts a run of job p_job_type when it is due (last start at least p_interval ago, a failed run''s retry_at reached, or p_force) and no live run holds the cursor (a running run older than reconcile.lease_sec is taken over). Returns the cursor with a new lease_token and last_run_started_at = now(), the next watermark, and failed_runs as it stands (the failures before this run); no row when nothing is to be run, and none before perform_cutover() or while paused (pause_sync()).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.claim_reconciliation_cursor(text,interval,boolean,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.finish_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  update bitrix_sync.reconciliation_cursors r
     set watermark = r.last_run_started_at, last_success_at = pg_catalog.now(), last_run_status = 'succeeded',
         last_error_code = null, last_scanned = p_scanned, last_updated = p_updated,
         last_recovered = coalesce(p_recovered, r.last_recovered),
         -- Smoothed usual value of recovered Contacts, for the spike alert of §10.2.
         recovered_baseline = case when p_recovered is null then r.recovered_baseline
                                   else coalesce(r.recovered_baseline * 0.8 + p_recovered * 0.2, p_recovered) end,
         lease_token = null, failed_runs = 0, retry_at = null
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_reconciliation_run(text, uuid, integer, integer, integer) is
  'running -> succeeded: the watermark moves to the run''s start, the counts are recorded (p_recovered also feeds the spike baseline), failed_runs goes back to 0. Refuses a run whose lease was taken over (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.finish_reconciliation_run(text,uuid,integer,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.fail_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  perform bitrix_sync._check_code(p_error_code);
  if p_retry_after < interval '0' then
    raise exception 'a reconciliation retry delay cannot be negative'
      using errcode = 'BS004', hint = 'Pass the backoff delay (src/crm/backoff.ts), or null to wait for the interval.';
  end if;
  update bitrix_sync.reconciliation_cursors r
     set last_run_status = 'failed', last_error_code = p_error_code, lease_token = null,
         -- A run given back at shutdown did not fail: the next replica starts it at once.
         failed_runs = r.failed_runs + case when p_error_code = 'shutdown' then 0 else 1 end,
         retry_at = case when p_error_code = 'shutdown' then pg_catalog.now()
                         else pg_catalog.now() + p_retry_after end
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fail_reconciliation_run(text, uuid, text, interval) is
  'running -> failed with a safe code; the watermark stays, so the next run reads the same window again. The run is due again after p_retry_after (the caller''s backoff; null: after the interval, as before) and failed_runs grows by one (not for shutdown, which is due at once). Refuses a run whose lease was taken over (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
