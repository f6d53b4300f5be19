-- The convergence audit as the admin and /metrics read it: drift by user and kind with its repair,
-- the audit at a glance, and its samples for metrics_snapshot (sql/metrics/snapshot.sql).

create or replace view bitrix_sync.status_drift as
select f.user_id, f.contact_id, f.kind, f.detected_at, f.last_seen_at, f.details,
       f.repair_requested_at, f.repair_intent,
       case when f.user_id is null then 'manual'
            else bitrix_sync._drift_repair_intent(array[f.kind::text],
                   coalesce(u.record_status = 'active' and p.record_status = 'active', false)) end as repair
  from bitrix_sync.drift_findings f
  left join han_app.user_identity u on u.id = f.user_id
  left join han_app.client_profile p on p.user_id = f.user_id;
comment on view bitrix_sync.status_drift is
  'Silent drift the convergence audit found, one row per user (or Contact without a user id) and kind: since when, last seen, safe details, whether a repair was recorded, and the intent repair_drift would record for this kind (manual: a person clears it in the CRM). Rows disappear when an audit finds them in step.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Drift found by the convergence audit, one row per user and kind, with the repair it would take.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_audit as
select s.last_run_mode as mode, s.last_run_status as status, s.last_run_started_at, s.last_success_at,
       s.last_all_success_at, s.last_error_code, s.last_audited, s.last_requests, s.last_links,
       s.last_overdue, s.registered_after_id, s.registered_cycle_seen, s.registered_cycle_total,
       s.registered_cycle_finished_at,
       (select count(*) from bitrix_sync.drift_findings)::bigint as open_findings,
       s.users_round_started_at, s.users_round_ended_at
  from bitrix_sync.audit_state s;
comment on view bitrix_sync.status_audit is
  'The convergence audit at a glance: the last run (mode, status, when, counts, error code), the last success and full run, links overdue, where the scan of registered Contacts is, how many findings are open, and when the sampled runs'' round over the users (the user kinds) started and when the last one ended.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_audit', array[]::text[], array['SELECT'], array[]::text[],
   'The convergence audit''s last run, progress and scan (docs/runbook.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.drift_metrics()
returns table (family text, labels jsonb, value double precision)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select 'bitrix_sync_drift_users', jsonb_build_object('kind', k.kind),
         (select count(*) from bitrix_sync.drift_findings f where f.kind = k.kind)::float8
    from unnest(array['contact_missing', 'crm_master_behind', 'inactive_user_linked', 'phone_missing',
                      'registered_inactive_user', 'registered_unknown_user', 'registered_wrong', 'unmapped_user',
                      'user_id_wrong']) k(kind)
  union all
  select m.family, '{}'::jsonb, m.value
    from bitrix_sync.audit_state s
   cross join lateral (values
     -- Until the first success: when the audit was installed, so a stopped audit is noticed.
     ('bitrix_sync_audit_last_success_timestamp_seconds', extract(epoch from coalesce(s.last_success_at, s.created_at))::float8),
     ('bitrix_sync_audit_running', case when s.last_run_status = 'running' then 1 else 0 end::float8),
     ('bitrix_sync_audit_enabled',
      case when (bitrix_sync._active_setting('audit.enabled') #>> '{}')::boolean and bitrix_sync.cutover_performed()
                and not bitrix_sync.sync_paused()
           then 1 else 0 end::float8),
     ('bitrix_sync_audit_interval_seconds', (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::float8),
     ('bitrix_sync_audit_links', coalesce(s.last_links, 0)::float8),
     ('bitrix_sync_audit_overdue_links', coalesce(s.last_overdue, 0)::float8),
     ('bitrix_sync_audit_progress_ratio',
      case when coalesce(s.last_links, 0) = 0 then 1 else 1 - s.last_overdue::float8 / s.last_links end)
   ) m(family, value)
   where s.singleton
$$;
comment on function bitrix_sync.drift_metrics() is
  'The convergence audit''s samples for GET /metrics (part of metrics_snapshot): open findings by kind (every kind, 0 included), the last success (the install time before the first), whether a run is running, whether the audit is enabled (setting, cutover, not paused), its interval, and from the last run the active links, those overdue and the share in time.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.drift_metrics()', array[]::text[], array[]::text[], array[]::text[],
   'Called by metrics_snapshot (security definer); not on its own.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
