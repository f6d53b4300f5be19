-- The deployment's view of the portal (§14): when the portal last answered any replica. Readiness
-- (crm_stale) judges the deployment, not the replica: a replica that was idle through an outage has
-- only failures of its own to go by, and would stay degraded (and keep BitrixSyncCrmOutage firing)
-- until a request of its own succeeded. Every request already releases its limiter slot after the
-- reply (sql/limiter.sql); that release carries the outcome and stamps the bucket's row, the one row
-- per portal every replica shares, at most once a second: no extra round trip, and no more than one
-- extra row write a second however busy the portal is.

create or replace function bitrix_sync.release_crm_request(p_slot_id uuid, p_bucket text, p_answered boolean)
returns boolean
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_released boolean;
  v_now timestamptz := clock_timestamp();
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id;
  v_released := found;
  if coalesce(p_answered, false) then
    perform bitrix_sync._check_limiter_name('bucket', p_bucket);
    -- A row written within the last second is left alone, and then not even locked.
    update bitrix_sync.crm_rate_buckets b
       set last_answered_at = v_now
     where b.bucket = p_bucket
       and (b.last_answered_at is null or b.last_answered_at < v_now - interval '1 second');
  end if;
  return v_released;
end $$;
comment on function bitrix_sync.release_crm_request(uuid, text, boolean) is
  'Frees an in-flight slot when its request has a reply or failed, as release_crm_request(uuid); p_answered true (the portal answered HTTP 2xx) also records the time on the bucket p_bucket (last_answered_at, at most once a second), where every replica''s readiness reads it. false when the slot had already expired.';

create or replace function bitrix_sync.crm_last_answered_at(p_bucket text) returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  select b.last_answered_at from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket
$$;
comment on function bitrix_sync.crm_last_answered_at(text) is
  'When the portal (bucket p_bucket, its host) last answered a request of any replica with HTTP 2xx; null before the first, or when no request went yet. Readiness and the status document read it.';

-- Privileges: sql/privileges.sql (the runtime calls both).
