-- Reconciliation runs (§10.2, §10.3): the cursor row of each job is its lock. A run is claimed when
-- it is due (the interval passed, or forced) and no other run holds the cursor; a run still marked
-- running after reconcile.lease_sec is taken to have died. The lease token fences the finish, and
-- the watermark moves only when a whole run succeeded.

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
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
    return;
  end if;
  insert into bitrix_sync.reconciliation_cursors (job_type) values (p_job_type) on conflict do nothing;
  select * into v_row from bitrix_sync.reconciliation_cursors where job_type = p_job_type for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= now() - v_lease then
    return; -- a run is in progress
  end if;
  if not coalesce(p_force, false) and v_row.last_run_started_at > now() - p_interval then
    return; -- not due yet
  end if;
  update bitrix_sync.reconciliation_cursors
     set last_run_started_at = now(), last_run_status = 'running', lease_token = gen_random_uuid(),
         overlap = coalesce(p_overlap, overlap)
   where job_type = p_job_type
  returning * into v_row;
  return next v_row;
end $$;
comment on function bitrix_sync.claim_reconciliation_cursor(text, interval, boolean, interval) is
  'Starts a run of job p_job_type when it is due (last start at least p_interval ago, or p_force) and no live run holds the cursor (a running run older than reconcile.lease_sec is taken over). Returns the cursor with a new lease_token and last_run_started_at = now(), the next watermark; no row when nothing is to be run, and none before perform_cutover().';

create or replace function bitrix_sync.finish_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  update bitrix_sync.reconciliation_cursors
     set watermark = last_run_started_at, last_success_at = now(), last_run_status = 'succeeded',
         last_error_code = null, last_scanned = p_scanned, last_updated = p_updated,
         last_recovered = coalesce(p_recovered, last_recovered),
         -- Smoothed usual value of recovered Contacts, for the spike alert of §10.2.
         recovered_baseline = case when p_recovered is null then recovered_baseline
                                   else coalesce(recovered_baseline * 0.8 + p_recovered * 0.2, p_recovered) end,
         lease_token = null
   where job_type = p_job_type and last_run_status = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_reconciliation_run(text, uuid, integer, integer, integer) is
  'running -> succeeded: the watermark moves to the run''s start, the counts are recorded (p_recovered also feeds the spike baseline). Refuses a run whose lease was taken over (BS001).';

create or replace function bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text)
returns bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.reconciliation_cursors
     set last_run_status = 'failed', last_error_code = p_error_code, lease_token = null
   where job_type = p_job_type and last_run_status = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fail_reconciliation_run(text, uuid, text) is
  'running -> failed with a safe code; the watermark stays, so the next run reads the same window again. Refuses a run whose lease was taken over (BS001).';
