-- Leases on han_app.sync_queue (§6.1): short claim transactions with FOR UPDATE SKIP LOCKED, a new
-- lease token on every claim, and completion only under the current token (fencing).

create or replace function bitrix_sync.claim_sync_tasks(
  p_worker text, p_limit integer, p_lease interval
) returns setof han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_watermark timestamptz;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- Nothing is processed before the cutover, and after it only intents recorded since the
  -- watermark (§17 step 8), also when an expired lease is reclaimed.
  select c.cutover_watermark into v_watermark from bitrix_sync.cutover c;
  -- Nor while processing is paused (sql/pause.sql): the App's journal keeps the intents.
  if v_watermark is null or bitrix_sync.sync_paused() then
    return;
  end if;
  -- The App's recorded intents first (han_app.sync_queue_journal). A fold running elsewhere is
  -- waited for (it is short), so every intent committed before this call is in the queue when the
  -- claim below looks: the intake watch's "one more look" (watch_intake()) relies on that.
  perform bitrix_sync.fold_intent_journal(10000, true);
  return query
  with due as (
    -- Not a user one of whose intents another intake holds (a live lease): a user's intents are
    -- taken one intake at a time, so they are applied in the order recorded and the next one sees
    -- the workflow the earlier one started. The fold's lock above serializes the claims, so the
    -- leases committed by the claim before this one are seen here (found by drill:rollback: two
    -- replicas took a user's deactivation and reactivation at once, and the user ended deactivated).
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
     where q.status in ('pending', 'retry_wait') and q.next_attempt_at <= now()
       and q.created_at >= v_watermark
       and not exists (select 1 from han_app.sync_queue l
                        where l.entity_type = q.entity_type and l.entity_id = q.entity_id
                          and l.status = 'leased' and l.locked_until > now())
     order by q.next_attempt_at, q.created_at
     limit p_limit
     for update skip locked
  ), expired as (
    select q.id, q.locked_until as sort_at from han_app.sync_queue q
     where q.status = 'leased' and q.locked_until < now() and q.created_at >= v_watermark
     order by q.locked_until
     limit p_limit
     for update skip locked
  ), picked as (
    select id, sort_at from (select * from due union all select * from expired) c order by sort_at limit p_limit
  ), leased as (
    update han_app.sync_queue q
       set status = 'leased',
           locked_by = left(p_worker, 128),
           locked_until = now() + p_lease,
           lease_token = gen_random_uuid(),
           attempt_count = q.attempt_count + 1,
           updated_at = now()
      from picked
     where q.id = picked.id
    returning q as r, picked.sort_at
  )
  -- In queue order: the intake starts or joins a user's workflow intent by intent in this order
  -- (take_sync_tasks), so the user's newest intent is applied last (fold_intent_journal places each
  -- row at its newest intent).
  select (l.r).* from leased l order by l.sort_at, (l.r).created_at, (l.r).id;
end $$;
comment on function bitrix_sync.claim_sync_tasks(text, integer, interval) is
  'Folds the App''s journal first (fold_intent_journal()), then claims up to p_limit due intents recorded since the cutover watermark (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED, returned in queue order (next_attempt_at, or an expired lease''s end), and none of a user another intake holds an intent of (a live lease); each gets a new lease_token. Two claimers never get the same row. Returns nothing before perform_cutover() and while paused (pause_sync()).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue set locked_until = now() + p_lease, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_sync_task_lease(uuid, uuid, interval) is
  'Extends a held lease. Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_sync_task(uuid, uuid) is
  'leased -> processed under the current lease token; a stale holder is refused (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'pending', locked_by = null, locked_until = null, lease_token = null,
         attempt_count = greatest(attempt_count - 1, 0), updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_sync_task(uuid, uuid) is
  'leased -> pending without spending an attempt (shutdown, paused sync). Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
