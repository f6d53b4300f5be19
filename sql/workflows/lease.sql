-- Workflows (§7.1): claimed under a lease; every transition is fenced by the lease token of the
-- worker stepping the workflow.
-- Fenced single-row statements test the state with IS NOT DISTINCT FROM (or wrap an IN list in
-- IS TRUE), never with a bare = or IN (issue 14). Same result for these NOT NULL columns, but the
-- planner cannot prove a partial index's predicate from it, so the row is found by its primary key.
-- With a bare comparison, statistics taken while few rows were live (an installation whose history
-- is finished work) made the planner prefer a live-state partial index that looked empty, and every
-- transition then scanned the whole backlog: quadratic in the backlog, until the next ANALYZE, which
-- on a table with a long history can be far off.

create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer, p_lease interval
) returns setof bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  return query
  with picked as (
    select w.id from bitrix_sync.workflow_instances w
     where w.state in ('created', 'running', 'waiting_retry')
       and w.next_attempt_at <= now()
       and (w.lease_token is null or w.locked_until < now())
     order by w.next_attempt_at, w.created_at
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.workflow_instances w
     set state = 'running',
         lease_token = gen_random_uuid(),
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         attempt_count = w.attempt_count + 1,
         updated_at = now()
    from picked
   where w.id = picked.id
  returning w.*;
end $$;
comment on function bitrix_sync.claim_workflows(text, integer, interval) is
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due). Returns nothing before perform_cutover() and while paused (pause_sync()).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state is not distinct from 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_workflow_lease(uuid, uuid, interval) is
  'Extends the lease of a running workflow. Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid)
returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  select * into v_row from bitrix_sync.workflow_instances
   where id = p_id and state is not distinct from 'running' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._held_workflow(uuid, uuid) is
  'Internal: the running workflow, locked, when the caller presents its current lease token; otherwise BS001.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._held_workflow(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the workflow functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
