-- Metrics (§15): what /metrics reads from the database in one call at scrape time. Counts, ages and
-- low-cardinality labels only (types, states, receivers, sources, safe codes): never a user or
-- Contact ID, a phone, an e-mail or a fingerprint. src/observability/metrics.ts turns the rows into
-- Prometheus families; docs/observability.md lists them.

create or replace function bitrix_sync.metrics_snapshot(p_bucket text default null, p_check_mappings boolean default false)
returns table (family text, labels jsonb, value double precision)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_burst double precision := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::double precision;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
  v_cutover timestamptz := (select c.cutover_watermark from bitrix_sync.cutover c);
begin
  -- Fold what the triggers appended since the last scrape. One scrape folds at a time; another
  -- scrape meanwhile reads the totals plus the rows not folded yet, which gives the same sums. The
  -- lock is SHARE UPDATE EXCLUSIVE on a table only the owner may lock (as the intake's fold,
  -- sql/enqueue.sql): an advisory lock, which any role may take, let one stop every fold.
  begin
    lock table bitrix_sync.lock_metrics_fold in share update exclusive mode nowait;
    with moved as (
      delete from bitrix_sync.metric_events e returning e.machine, e.kind, e.from_state, e.to_state
    )
    insert into bitrix_sync.metric_event_totals as t (machine, kind, from_state, to_state, count)
    select m.machine, m.kind, m.from_state, m.to_state, count(*) from moved m group by 1, 2, 3, 4
    on conflict (machine, kind, from_state, to_state) do update set count = t.count + excluded.count;
  exception when lock_not_available then
    null; -- another scrape is folding
  end;

  return query
  -- Live states only: each filter reaches the status view's scan (its grouping column), so no
  -- finished row is read.
  with queue as (
    select q.status, q.count, q.oldest_age_sec from bitrix_sync.status_queue q
     where q.status in ('pending', 'leased', 'retry_wait')
  ), queue_all as (
    -- Every live status always present (0 when empty), so "older than" alerts have a series.
    select s.status, coalesce(q.count, 0) as count, coalesce(q.oldest_age_sec, 0) as oldest_age_sec
      from unnest(array['pending', 'leased', 'retry_wait']) s(status) left join queue q on q.status = s.status
  ), workflows as (
    select w.workflow_type, w.state, w.count, w.oldest_age_sec from bitrix_sync.status_workflows w
     where w.state in ('created', 'running', 'waiting_crm', 'waiting_retry', 'waiting_manual')
  ), commands as (
    select c.command_type, c.status, c.count, c.oldest_age_sec from bitrix_sync.status_commands c
     where c.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')
  ), inbox as (
    select h.receiver, h.status, h.count, h.oldest_age_sec from bitrix_sync.status_webhooks h
     where h.status in ('received', 'coalesced', 'processing', 'retry_wait')
  ), dead as (
    select d.source, d.operation, d.error_code, d.count, d.oldest_age_sec from bitrix_sync.status_dead_letters d
  ), alerts as (
    select a.alert_type, a.severity, a.open_count, a.sla_overdue from bitrix_sync.status_alerts a
  ), mirror as (
    -- Alerts whose smart-process item is behind; both statuses always present (0 when none). The
    -- age counts from the last change, or from the alert's creation while it has no item at all:
    -- an alert that keeps recurring but never reaches the smart process still ages.
    select s.status, coalesce(m.count, 0) as count,
           coalesce(extract(epoch from now() - m.oldest_at), 0)::bigint as oldest_age_sec
      from unnest(array['pending', 'failed']) s(status)
      left join (select a.crm_sync_status as status, count(*) as count,
                        min(case when a.item_id is null then a.created_at else a.updated_at end) as oldest_at
                   from bitrix_sync.business_alerts a
                  where a.crm_sync_status <> 'synced'
                  group by a.crm_sync_status) m on m.status = s.status
  ), cursors as (
    -- The alert job runs only while alerts.entity_type_id is set: a cursor left from an earlier
    -- configuration does not trail.
    select r.job_type, r.watermark, r.failed_runs from bitrix_sync.reconciliation_cursors r
     where r.job_type <> 'alerts' or bitrix_sync._active_setting('alerts.entity_type_id') <> 'null'::jsonb
  ), events as (
    -- The folded totals plus whatever a concurrent scrape has not folded yet.
    select e.machine, e.kind, e.from_state, e.to_state, sum(e.n) as n
      from (select t.machine, t.kind, t.from_state, t.to_state, t.count as n from bitrix_sync.metric_event_totals t
            union all
            select p.machine, p.kind, p.from_state, p.to_state, 1 from bitrix_sync.metric_events p) e
     group by e.machine, e.kind, e.from_state, e.to_state
  )
  select 'bitrix_sync_queue_depth', jsonb_build_object('status', q.status), q.count::float8 from queue_all q
  union all
  select 'bitrix_sync_queue_oldest_age_seconds', jsonb_build_object('status', q.status), q.oldest_age_sec::float8
    from queue_all q
  union all
  select 'bitrix_sync_workflows_active', jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state),
         w.count::float8 from workflows w
  union all
  select 'bitrix_sync_workflows_oldest_age_seconds',
         jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state), w.oldest_age_sec::float8 from workflows w
  union all
  select 'bitrix_sync_crm_commands', jsonb_build_object('command_type', c.command_type, 'status', c.status),
         c.count::float8 from commands c
  union all
  select 'bitrix_sync_crm_commands_oldest_age_seconds',
         jsonb_build_object('command_type', c.command_type, 'status', c.status), c.oldest_age_sec::float8 from commands c
  union all
  select 'bitrix_sync_webhook_inbox', jsonb_build_object('receiver', h.receiver, 'status', h.status), h.count::float8
    from inbox h
  union all
  select 'bitrix_sync_webhook_inbox_oldest_age_seconds', jsonb_build_object('receiver', h.receiver, 'status', h.status),
         h.oldest_age_sec::float8 from inbox h
  union all
  select 'bitrix_sync_dead_letters_open',
         jsonb_build_object('source', d.source, 'operation', d.operation, 'code', d.error_code), d.count::float8 from dead d
  union all
  select 'bitrix_sync_dead_letters_oldest_age_seconds', jsonb_build_object('source', d.source),
         max(d.oldest_age_sec)::float8 from dead d group by d.source
  union all
  select 'bitrix_sync_business_alerts_open', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.open_count::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_sla_overdue', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.sla_overdue::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_unmirrored', jsonb_build_object('mirror_status', m.status), m.count::float8
    from mirror m
  union all
  -- A pass over the active mappings: the service asks for it at most once a minute.
  select 'bitrix_sync_mapping_invariant_violations', '{}'::jsonb, count(*)::float8
    from bitrix_sync.entity_external_mapping m
    join han_app.user_identity u on u.id = m.entity_id
   where p_check_mappings and m.status = 'active' and u.record_status <> 'active'
  having p_check_mappings
  union all
  -- Links made by phone alone whose CRM-master fields are held back (always present, 0 when none).
  select 'bitrix_sync_phone_links_held', '{}'::jsonb, h.count::float8 from bitrix_sync.status_held_links h
  union all
  select 'bitrix_sync_phone_links_held_oldest_age_seconds', '{}'::jsonb, h.oldest_age_sec::float8
    from bitrix_sync.status_held_links h
  union all
  -- From the cutover while no run has succeeded yet: a job that never succeeds still trails.
  select 'bitrix_sync_reconciliation_cursor_lag_seconds', jsonb_build_object('job_type', r.job_type),
         greatest(0, extract(epoch from now() - coalesce(r.watermark, v_cutover)))::float8
    from cursors r
   where coalesce(r.watermark, v_cutover) is not null
  union all
  select l.family, '{}'::jsonb, l.value
    from bitrix_sync.crm_rate_buckets b
   cross join lateral (values
     -- Refilled to now at the stored rate factor, as the next acquire_crm_request() would see it.
     ('bitrix_sync_limiter_tokens',
      least(v_burst, b.tokens + v_refill * b.rate_factor * greatest(0, extract(epoch from clock_timestamp() - b.refilled_at)))),
     ('bitrix_sync_limiter_rate_factor', b.rate_factor),
     ('bitrix_sync_limiter_throttled_seconds',
      greatest(0, coalesce(extract(epoch from b.throttled_until - clock_timestamp()), 0))::float8),
     ('bitrix_sync_limiter_in_flight',
      (select count(*) from bitrix_sync.crm_inflight_slots s
        where s.bucket = b.bucket and s.expires_at > clock_timestamp())::float8),
     ('bitrix_sync_limiter_blocked_methods',
      (select count(*) from bitrix_sync.crm_method_blocks m
        where m.bucket = b.bucket and m.blocked_until > clock_timestamp())::float8)
   ) l(family, value)
   where b.bucket = p_bucket
  union all
  select 'bitrix_sync_workflow_transitions_total',
         jsonb_build_object('workflow_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'workflow'
  union all
  select 'bitrix_sync_command_transitions_total',
         jsonb_build_object('command_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'command'
  union all
  -- Present from the start for every receiver and source (0 before the first event), so increase()
  -- sees the first one.
  select 'bitrix_sync_webhook_coalesced_total', jsonb_build_object('receiver', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'webhook' and e.kind = k.kind), 0)::float8
    from unnest(array['contact', 'alert']) k(kind)
  union all
  select 'bitrix_sync_dead_letters_total', jsonb_build_object('source', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'dead_letter' and e.kind = k.kind), 0)::float8
    from unnest(array['sync_queue', 'workflow', 'crm_command', 'webhook']) k(kind)
  -- Silent failures (docs/runbook.md): a run that keeps failing, the interval each lag is measured
  -- against, alerts that do not reach the smart process, items deleted in the CRM.
  union all
  select 'bitrix_sync_reconciliation_failed_runs', jsonb_build_object('job_type', r.job_type), r.failed_runs::float8
    from cursors r
  union all
  select 'bitrix_sync_reconciliation_interval_seconds', jsonb_build_object('job_type', i.job_type),
         (bitrix_sync._active_setting(i.key) #>> '{}')::float8
    from (values ('contacts', 'reconcile.contacts_interval_sec'), ('alerts', 'alerts.reconcile_interval_sec')) i(job_type, key)
  union all
  select 'bitrix_sync_business_alerts_unmirrored_oldest_age_seconds', jsonb_build_object('mirror_status', m.status),
         m.oldest_age_sec::float8 from mirror m
  union all
  select 'bitrix_sync_business_alerts_mirror_enabled', '{}'::jsonb,
         case when bitrix_sync._active_setting('alerts.database_only') = 'true'::jsonb then 0 else 1 end::float8
  union all
  -- Present from the start (0 before the first), so increase() sees the first one.
  select 'bitrix_sync_business_alerts_remote_missing_total', '{}'::jsonb,
         coalesce((select sum(e.n) from events e where e.machine = 'alert' and e.to_state = 'remote_missing'), 0)::float8
  union all
  -- The convergence audit (sql/convergence_audit.sql): drift by kind, its last success and progress.
  select d.family, d.labels, d.value from bitrix_sync.drift_metrics() d
  union all
  -- The last recovered-without-webhook spike (sql/reconciliation/spikes.sql).
  select r.family, r.labels, r.value from bitrix_sync.reconciliation_spike_metrics() r;
end $$;
comment on function bitrix_sync.metrics_snapshot(text, boolean) is
  'Every database-derived Prometheus sample for GET /metrics in one call: queue, workflow, command and inbox depths and oldest ages (live states), open dead letters, business alerts and their mirror (behind, its age, whether it is on, items deleted in the CRM), the convergence audit (drift by kind, last success, progress), links held after a phone-only link, reconciliation cursor lag, failed runs and intervals, the last recovered-without-webhook spike, the limiter bucket p_bucket, and the transition counters (folded from metric_events first). p_check_mappings adds the mapping invariant count (a pass over the active mappings). Rows: (family, labels, value); labels are low-cardinality only.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.metrics_snapshot(text,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'GET /metrics (security definer): counts, ages and counters with low-cardinality labels; the admin may run it in psql.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
