-- A variant for BENCH_SETUP_SQL (npm run bench:scale, bench:engine, bench:peers, bench:e2e): migration
-- 000054 undone on a database at 000054, claim_sync_tasks() as before it (one ORDER BY over both due
-- statuses, which read and sorted every due intent on each call), so the two can be run alternately.
-- Re-running migration 000054's sql/queue/claim.sql puts it back. docs/performance.md.
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
