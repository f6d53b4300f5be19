-- The convergence audit's shared pieces: who is busy (judged by a later run), the run's lease, and
-- the counts that size a run.

create or replace function bitrix_sync._drift_busy_users(p_since timestamptz, p_user_ids uuid[] default null)
returns table (user_id uuid)
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- Users the ordinary paths are working on, or worked on since the audit read their data: an
  -- intent recorded or queued, a workflow unfinished or moved since p_since, a snapshot written
  -- since p_since, a Contact webhook waiting. What the audit read of them may be out of date, and
  -- what is out of step may be on its way back: such users are judged by a later run. Only the
  -- users asked about, each through its own index (the journal, which the fold keeps short, aside):
  -- never a scan of the snapshots or the history.
  select j.user_id from han_app.sync_queue_journal j where j.user_id = any(p_user_ids)
  union
  select q.entity_id from han_app.sync_queue q
   where q.entity_id = any(p_user_ids) and q.status in ('pending', 'leased', 'retry_wait')
  union
  select w.user_id from bitrix_sync.workflow_instances w
   where w.user_id = any(p_user_ids)
     and (w.state not in ('succeeded', 'failed', 'cancelled') or w.finished_at >= p_since)
  union
  select s.user_id from bitrix_sync.contact_snapshots s
   where s.user_id = any(p_user_ids) and s.updated_at >= p_since
  union
  select m.entity_id from bitrix_sync.webhook_inbox i
    join bitrix_sync.entity_external_mapping m on m.external_id = i.entity_id and m.status = 'active'
   where i.status in ('received', 'retry_wait', 'processing') and i.receiver = 'contact'
     and m.entity_id = any(p_user_ids)
$$;
comment on function bitrix_sync._drift_busy_users(timestamptz, uuid[]) is
  'Internal: those of p_user_ids (null: none) with work in progress or done since p_since: an intent in the journal or the queue, a workflow unfinished or changed, a snapshot written, a Contact webhook waiting. The audit leaves their findings as they are this run.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._drift_busy_users(timestamp with time zone,uuid[])', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._check_audit_lease(p_lease_token uuid) returns bitrix_sync.audit_state
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
begin
  select * into v_row from bitrix_sync.audit_state s
   where s.singleton and s.last_run_status = 'running' and s.lease_token = p_lease_token;
  if not found then
    perform bitrix_sync._refuse_stale('convergence audit run', 'audit');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._check_audit_lease(uuid) is
  'Internal: the audit state when p_lease_token holds the running audit; BS001 otherwise (the run was taken over after audit.lease_sec).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._check_audit_lease(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._planner_count(p_rel regclass) returns bigint
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- reltuples as the last VACUUM or ANALYZE left it (autovacuum keeps it within a few per cent).
  select c.reltuples::bigint from pg_catalog.pg_class c where c.oid = p_rel and c.reltuples >= 100000
$$;
comment on function bitrix_sync._planner_count(regclass) is
  'Internal: the planner''s count of a table''s rows or an index''s entries when it is 100 000 or more; null below, or never counted, where the caller counts exactly. Sizes an audit run (_active_link_count, refresh_user_drift).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._planner_count(regclass)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._active_link_count() returns bigint
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- The entries of the partial index of active links, or counted exactly when there are few.
  select coalesce(bitrix_sync._planner_count('bitrix_sync.entity_external_mapping_active_entity_uq'),
                  (select count(*) from bitrix_sync.entity_external_mapping m where m.status = 'active'))
$$;
comment on function bitrix_sync._active_link_count() is
  'Internal: how many links are active: counted exactly below 100 000, otherwise the planner''s count of entity_external_mapping_active_entity_uq (_planner_count). Sizes an audit run and fills status_audit.last_links.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._active_link_count()', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
