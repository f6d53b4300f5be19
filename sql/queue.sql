-- Leases on han_app.sync_queue (§6.1): short claim transactions with FOR UPDATE SKIP LOCKED, a new
-- lease token on every claim, and completion only under the current token (fencing).

create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  if p_code is null or p_code !~ '^[a-z0-9][a-z0-9_.]{0,63}$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
comment on function bitrix_sync._check_code(text) is
  'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';

create or replace function bitrix_sync._refuse_stale(p_what text, p_id text) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;
comment on function bitrix_sync._refuse_stale(text, text) is
  'Raises BS001 for a completion that does not present the current lease token (a stale holder).';

create or replace function bitrix_sync.claim_sync_tasks(
  p_worker text, p_limit integer, p_lease interval
) returns setof han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_watermark timestamptz;
begin
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
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
     where q.status in ('pending', 'retry_wait') and q.next_attempt_at <= now()
       and q.created_at >= v_watermark
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
    select id from (select * from due union all select * from expired) c order by sort_at limit p_limit
  )
  update han_app.sync_queue q
     set status = 'leased',
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         lease_token = gen_random_uuid(),
         attempt_count = q.attempt_count + 1,
         updated_at = now()
    from picked
   where q.id = picked.id
  returning q.*;
end $$;
comment on function bitrix_sync.claim_sync_tasks(text, integer, interval) is
  'Folds the App''s journal first (fold_intent_journal()), then claims up to p_limit due intents recorded since the cutover watermark (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED; each gets a new lease_token. Two claimers never get the same row. Returns nothing before perform_cutover() and while paused (pause_sync()).';

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
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

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
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

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
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

create or replace function bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_row.id
  returning * into v_row;
  -- The intent's first attempt is its arrival: it is claimed as soon as it is due.
  perform bitrix_sync._dead_letter('sync_queue', v_row.id::text, v_row.task_type, p_error_code,
    v_row.attempt_count, v_row.created_at, null, null, null, null, null);
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue, text) is
  'Internal: moves a held intent to dead_letter and writes its technical DLQ row (first attempt = created_at).';

create or replace function bitrix_sync.retry_sync_task(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.created_at) then
    return bitrix_sync._dead_letter_sync_task_row(v_row, 'retry_horizon_exceeded');
  end if;
  update han_app.sync_queue
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_sync_task(uuid, uuid, text, interval) is
  'leased -> retry_wait after p_delay with a safe error code; when the retry would fall past the horizon (created_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. The returned status says which. Refuses a stale token (BS001).';

create or replace function bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return bitrix_sync._dead_letter_sync_task_row(v_row, p_error_code);
end $$;
comment on function bitrix_sync.dead_letter_sync_task(uuid, uuid, text) is
  'leased -> dead_letter and a technical_dead_letters row with the safe code. Refuses a stale token (BS001).';

create or replace function bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_reason);
  update han_app.sync_queue
     set status = 'cancelled', cancel_reason = p_reason, completed_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.cancel_sync_task(uuid, uuid, text) is
  'leased -> cancelled with a reason code (e.g. user not eligible). Refuses a stale token (BS001).';
