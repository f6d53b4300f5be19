-- A convergence audit run (the runtime role): claimed when due, sampled, finished or failed, each
-- fenced by the run's lease; and a run an admin asks for now.

create or replace function bitrix_sync.claim_audit_run(p_all boolean default false, p_force boolean default false)
returns table (lease_token uuid, mode text, started_at timestamptz, sample_limit integer,
               registered_after_id bigint, registered_pages integer, recheck_contact_ids bigint[])
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
  v_interval_sec integer := (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::integer;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('audit.lease_sec') #>> '{}')::integer);
  v_period_sec double precision := (bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer * 86400.0;
  v_enabled boolean := (bitrix_sync._active_setting('audit.enabled') #>> '{}')::boolean;
  v_links bigint;
  v_due bigint;
  v_mode text := case when coalesce(p_all, false) then 'all' else 'sample' end;
begin
  -- The processing gate (§17): nothing is judged before the cutover, nor while processing is
  -- paused (sql/pause.sql): a paused sync would show as drift.
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  select * into v_row from bitrix_sync.audit_state s where s.singleton for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= now() - v_lease then
    return; -- a run is in progress
  end if;
  if v_mode = 'sample' and not coalesce(p_force, false)
     and (not v_enabled or v_row.last_run_started_at > now() - make_interval(secs => v_interval_sec)) then
    return; -- switched off, or not due yet
  end if;
  update bitrix_sync.audit_state s
     set last_run_started_at = now(), last_run_mode = v_mode, last_run_status = 'running',
         lease_token = pg_catalog.gen_random_uuid(),
         registered_cycle_started_at = coalesce(s.registered_cycle_started_at, now())
   where s.singleton
  returning * into v_row;

  -- Spread over the period: each run takes its share of the links, and every link that would be
  -- overdue before the next run (never compared: its mark holds when it was opened). The share is
  -- sized from _active_link_count() (exact for small installations, the planner's count for large
  -- ones); the overdue ones are counted exactly, from the oldest mark on, through audit_marks_due_idx.
  v_links := bitrix_sync._active_link_count();
  select count(*) into v_due
    from bitrix_sync.audit_marks k
    join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
   where k.audited_at <= now() - make_interval(secs => v_period_sec - v_interval_sec);
  return query
  select v_row.lease_token, v_mode, v_row.last_run_started_at,
         case when v_mode = 'all' then null
              else greatest(ceil(v_links * v_interval_sec / v_period_sec), v_due)::integer end,
         case when v_mode = 'all' then 0::bigint else v_row.registered_after_id end,
         case when v_mode = 'all' then null
              else greatest(1, ceil((coalesce(v_row.registered_cycle_total, 0) / 50.0 + 1) * v_interval_sec / v_period_sec))::integer end,
         -- Contacts of open registered findings are read again by ID every run, so a repair is
         -- confirmed without waiting for the scan to come round.
         (select array_agg(x.c order by x.c)
            from (select distinct f.contact_id::bigint as c from bitrix_sync.drift_findings f
                   where bitrix_sync._drift_kind_group(f.kind) = 'registered' and f.contact_id is not null
                   order by 1 limit 2500) x);
end $$;
comment on function bitrix_sync.claim_audit_run(boolean, boolean) is
  'Starts a convergence audit run when none is running (one still marked running after audit.lease_sec is taken over) and, for a sampled run, when audit.enabled and audit.interval_sec has passed (or p_force). p_all: every active link and the whole registered scan. Returns the lease, how many links to sample (their share of audit.period_days plus those about to be overdue; null: all), where the registered scan goes on, how many pages this run reads (null: to the end), and the Contacts of open registered findings to read again. No row when nothing is to run, and none before perform_cutover() or while paused (pause_sync()).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.claim_audit_run(boolean,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.audit_sample(p_lease_token uuid, p_limit integer default null)
returns table (mapping_id uuid, user_id uuid, contact_id text, has_findings boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_limit is not null and p_limit < 0 then
    raise exception 'an audit sample cannot have a negative size (%)', p_limit
      using errcode = 'BS004', hint = 'Pass null for every link, or the limit claim_audit_run returned.';
  end if;
  -- Active links of eligible users (the others are judged in SQL: inactive_user_linked). Links
  -- whose user has an open finding of the link kinds come first, so a repair is confirmed by the
  -- next run (a few: the open findings); then the least recently compared (never compared: by when
  -- they were opened), walked from the oldest mark through audit_marks_due_idx and stopped at
  -- p_limit, so a run reads its share of the links, not all of them.
  return query
  with flagged as (
    select m.id, m.entity_id, m.external_id::text as contact_id, k.audited_at
      from (select distinct f.user_id from bitrix_sync.drift_findings f
             where f.user_id is not null and bitrix_sync._drift_kind_group(f.kind) = 'link') f
      join bitrix_sync.entity_external_mapping m on m.entity_id = f.user_id and m.status = 'active'
      join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
      join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
      join bitrix_sync.audit_marks k on k.mapping_id = m.id
  ), rest as (
    select m.id, m.entity_id, m.external_id::text as contact_id, k.audited_at
      from bitrix_sync.audit_marks k
      join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
      join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
      join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
     where not exists (select 1 from flagged x where x.id = m.id)
     order by k.audited_at, k.mapping_id
     limit p_limit
  )
  select x.id, x.entity_id, x.contact_id, x.flagged
    from (select f.id, f.entity_id, f.contact_id, true as flagged, f.audited_at from flagged f
          union all
          select r.id, r.entity_id, r.contact_id, false, r.audited_at from rest r) x
   order by x.flagged desc, x.audited_at, x.id
   limit p_limit;
end $$;
comment on function bitrix_sync.audit_sample(uuid, integer) is
  'The links the running audit compares with their Contacts, under its lease: active links of active users, those whose user has an open link finding first, then the least recently compared; p_limit of them (null: all).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.audit_sample(uuid,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer)
returns bitrix_sync.audit_state
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
  v_period interval := make_interval(days => (bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer);
  v_links integer;
  v_overdue integer;
begin
  v_row := bitrix_sync._check_audit_lease(p_lease_token);
  if p_audited is null or p_audited < 0 or p_requests is null or p_requests < 0 then
    raise exception 'an audit run finishes with the number of links compared and of requests sent'
      using errcode = 'BS004', hint = 'Both are counts (>= 0).';
  end if;
  -- The active links (sized as claim_audit_run sizes a run), and those of eligible users not
  -- compared within the period, counted from the oldest mark on through audit_marks_due_idx.
  v_links := bitrix_sync._active_link_count();
  select count(*) into v_overdue
    from bitrix_sync.audit_marks k
    join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
    join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
    join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
   where k.audited_at < now() - v_period;
  update bitrix_sync.audit_state s
     set last_run_status = 'succeeded', lease_token = null, last_success_at = now(),
         last_all_success_at = case when s.last_run_mode = 'all' then now() else s.last_all_success_at end,
         last_error_code = null, last_audited = p_audited, last_requests = p_requests,
         last_links = v_links, last_overdue = v_overdue
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.finish_audit_run(uuid, integer, integer) is
  'running -> succeeded: records the counts, the active links (_active_link_count()) and how many active links of eligible users are overdue (not compared within audit.period_days). Refuses a run whose lease was taken over (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.finish_audit_run(uuid,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.fail_audit_run(p_lease_token uuid, p_error_code text)
returns bitrix_sync.audit_state
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_audit_lease(p_lease_token);
  update bitrix_sync.audit_state s
     set last_run_status = 'failed', lease_token = null, last_error_code = p_error_code
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.fail_audit_run(uuid, text) is
  'running -> failed with a safe code. What the run recorded before it failed stays; the next run goes on. Refuses a run whose lease was taken over (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.fail_audit_run(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _900_set_updated_at on bitrix_sync.audit_state;
create trigger _900_set_updated_at before update on bitrix_sync.audit_state
  for each row execute function bitrix_sync.tg__set_updated_at();
comment on trigger _900_set_updated_at on bitrix_sync.audit_state is 'Stamps updated_at on every change.';

create or replace function bitrix_sync.request_convergence_audit(
  p_requested_by text, p_reason text, p_all boolean default true
) returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_job_id bigint;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  perform bitrix_sync._record_admin_action(
    case when coalesce(p_all, true) then 'request_full_audit' else 'request_audit' end,
    null, null, null, null, p_reason, p_requested_by);
  select (graphile_worker.add_job(
            'audit_convergence',
            json_build_object('all', coalesce(p_all, true), 'force', true),
            job_key := case when coalesce(p_all, true) then 'audit_convergence_all' else 'audit_convergence_now' end,
            max_attempts := 25)).id
    into v_job_id;
  return v_job_id;
end $$;
comment on function bitrix_sync.request_convergence_audit(text, text, boolean) is
  'Admin: queues a convergence audit run now (graphile-worker job audit_convergence): with p_all (the default) every active link and the whole scan of registered Contacts, e.g. after a restore from backup or an incident; otherwise a sampled run. Audited in admin_actions. Returns the job id. The run itself happens in the service within seconds (graphile-worker retries it while another run holds the audit).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.request_convergence_audit(text,text,boolean)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Queues an audit run now (e.g. {"all": true} after a restore); audited.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
