-- Status views (§14): counts and ages only, never PII, Contact/user IDs or raw errors. Readable by
-- bitrix_sync_admin and used by GET /internal/sync/v1/status and /metrics.
--
-- Each view reads live rows only, through a partial index whose predicate is the view's WHERE
-- (written the same way, so the planner can prove it), never the finished history that retention
-- deletes later: a scrape costs the same with a year of history as with a day
-- (test/integration/status-plans.test.ts).

-- Intents the App recorded that no claim has folded yet (han_app.sync_queue_journal) are pending too:
-- a service that stopped folding shows a growing, ageing pending depth.
create or replace view bitrix_sync.status_queue as
select g.status, sum(g.count)::bigint as count,
       extract(epoch from now() - min(g.oldest_at))::bigint as oldest_age_sec
  from (select q.status, count(*) as count, min(q.created_at) as oldest_at
          from han_app.sync_queue q
         where q.status in ('pending', 'leased', 'retry_wait', 'dead_letter')
         group by q.status
        union all
        select 'pending'::varchar(16), count(*), min(j.recorded_at)
          from han_app.sync_queue_journal j
        having count(*) > 0) g
 group by g.status;
comment on view bitrix_sync.status_queue is
  'han_app.sync_queue depth and oldest age by live status (pending, leased, retry_wait) and dead_letter, with the intents still in han_app.sync_queue_journal counted as pending; processed and cancelled rows are history, not depth.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_queue', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_workflows as
select w.workflow_type, w.state, count(*)::bigint as count,
       extract(epoch from now() - min(w.created_at))::bigint as oldest_age_sec
  from bitrix_sync.workflow_instances w
 where w.state not in ('succeeded', 'failed', 'cancelled')
 group by w.workflow_type, w.state;
comment on view bitrix_sync.status_workflows is 'Active workflows by type and state, with the oldest age.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_workflows', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_commands as
select c.command_type, c.status, count(*)::bigint as count,
       extract(epoch from now() - min(c.created_at))::bigint as oldest_age_sec
  from bitrix_sync.crm_commands c
 where c.status <> 'succeeded'
 group by c.command_type, c.status;
comment on view bitrix_sync.status_commands is 'Unfinished and dead-lettered CRM commands by type and status.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_commands', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_webhooks as
select w.receiver, w.status, count(*)::bigint as count,
       extract(epoch from now() - min(w.received_at))::bigint as oldest_age_sec
  from bitrix_sync.webhook_inbox w
 where w.status <> 'processed'
 group by w.receiver, w.status;
comment on view bitrix_sync.status_webhooks is 'Unprocessed webhook inbox rows by receiver and status (webhook lag).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_webhooks', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_dead_letters as
select d.source, d.operation, d.error_code, count(*)::bigint as count,
       extract(epoch from now() - min(d.created_at))::bigint as oldest_age_sec
  from bitrix_sync.technical_dead_letters d
 where d.resolved_at is null
 group by d.source, d.operation, d.error_code;
comment on view bitrix_sync.status_dead_letters is 'Open technical dead letters by source, operation and safe code.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_dead_letters', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_alerts as
select a.alert_type, a.severity, count(*)::bigint as open_count,
       count(*) filter (where a.first_occurred_at < now() - make_interval(hours =>
         (select (bitrix_sync._active_setting('alerts.sla_hours') #>> '{}')::integer)))::bigint as sla_overdue
  from bitrix_sync.business_alerts a
 where a.status = 'open'
 group by a.alert_type, a.severity;
comment on view bitrix_sync.status_alerts is 'Open business alerts by type and severity, with how many are past the SLA.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_alert_mirror as
select a.crm_sync_status as mirror_status, count(*)::bigint as count,
       extract(epoch from now() - min(a.updated_at))::bigint as oldest_age_sec
  from bitrix_sync.business_alerts a
 where a.crm_sync_status <> 'synced'
 group by a.crm_sync_status;
comment on view bitrix_sync.status_alert_mirror is
  'Business alerts whose smart-process item is behind: pending (a change not yet sent, e.g. alerts.entity_type_id unset or an unanswered add being looked up) and failed (could not be mirrored; see technical_dead_letters).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_alert_mirror', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14): alerts whose smart-process item is behind (pending, failed); read by /metrics.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_held_links as
select count(*)::bigint as count,
       coalesce(extract(epoch from now() - min(m.held_at)), 0)::bigint as oldest_age_sec
  from bitrix_sync.entity_external_mapping m
 where m.status = 'active' and m.held_at is not null and m.hold_released_at is null;
comment on view bitrix_sync.status_held_links is
  'Status (§14): active links made by phone alone whose CRM-master fields are held back (mapping.hold_after_phone_link), with the oldest hold''s age. Counts only.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_held_links', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): links whose CRM-master fields are held back; counts only.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
