-- CRM rate limiter (§8, §9), shared by every replica through PostgreSQL: one bucket row per portal,
-- refilled and taken under its row lock in acquire_crm_request(), and in-flight slots that expire.
-- The TypeScript side (src/crm/limiter.ts) calls acquire_crm_request() before each HTTP request and
-- release_crm_request() after it; replies feed the functions of sql/limiter/feedback.sql. Settings
-- (rate, burst, in-flight cap) come in as parameters, read by the caller from
-- bitrix_sync.active_settings(). Errors: SQLSTATE BS010..BS012.

create or replace function bitrix_sync._check_limiter_name(p_what text, p_value text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  if p_value is null or length(p_value) not between 1 and 200 then
    raise exception 'limiter % must be a non-empty name of at most 200 characters', p_what
      using errcode = 'BS012', hint = 'Pass the portal host as the bucket and a REST method name as the method.';
  end if;
end $$;
comment on function bitrix_sync._check_limiter_name(text, text) is
  'Refuses an empty or oversized bucket/holder/method name with BS012.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._check_limiter_name(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.acquire_crm_request(
  p_bucket text,
  p_holder text,
  p_refill_per_sec double precision,
  p_burst integer,
  p_max_in_flight integer,
  p_slot_ttl_ms integer,
  p_recovery_per_sec double precision
) returns table (granted boolean, slot_id uuid, wait_ms integer, tokens double precision,
                 rate double precision, in_flight integer, decided_at timestamptz)
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
  v_rate double precision;
  v_tokens double precision;
  v_in_flight integer;
  v_next_expiry timestamptz;
  v_slot uuid;
  v_wait integer;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('holder', p_holder);
  if p_refill_per_sec is null or p_refill_per_sec <= 0 or p_burst is null or p_burst < 1
     or p_max_in_flight is null or p_max_in_flight < 1 or p_slot_ttl_ms is null or p_slot_ttl_ms < 1
     or p_recovery_per_sec is null or p_recovery_per_sec < 0 then
    raise exception 'limiter settings out of range: refill %, burst %, max in flight %, slot ttl % ms',
      p_refill_per_sec, p_burst, p_max_in_flight, p_slot_ttl_ms
      using errcode = 'BS010',
            hint = 'Check limiter.refill_per_sec (> 0), limiter.burst (>= 1) and limiter.max_in_flight (>= 1) in bitrix_sync.settings.';
  end if;

  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (p_bucket, p_burst, clock_timestamp())
  on conflict (bucket) do nothing;
  -- One row lock serialises every replica's decision for this bucket; the clock is read after it.
  select * into strict v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  v_now := clock_timestamp();

  v_factor := bitrix_sync._bucket_rate_factor(v_row.rate_factor, p_recovery_per_sec, v_row.rate_changed_at, v_now);
  v_rate := p_refill_per_sec * v_factor;
  v_tokens := bitrix_sync._bucket_tokens(v_row.tokens, v_rate, p_burst, v_row.refilled_at, v_now);

  delete from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket and s.expires_at <= v_now;
  select count(*)::integer, min(s.expires_at) into v_in_flight, v_next_expiry
    from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket;

  if v_row.throttled_until is not null and v_row.throttled_until > v_now then
    v_wait := ceil(extract(epoch from v_row.throttled_until - v_now) * 1000)::integer;
  elsif v_in_flight >= p_max_in_flight then
    -- Slots are normally released long before they expire: suggest polling soon.
    v_wait := least(100, greatest(1, ceil(extract(epoch from v_next_expiry - v_now) * 1000)))::integer;
  elsif v_tokens < 1 then
    v_wait := greatest(1, ceil((1 - v_tokens) / v_rate * 1000))::integer;
  else
    v_tokens := v_tokens - 1;
    insert into bitrix_sync.crm_inflight_slots as s (bucket, holder, acquired_at, expires_at)
    values (p_bucket, p_holder, v_now, v_now + make_interval(secs => p_slot_ttl_ms / 1000.0))
    returning s.slot_id into v_slot;
    v_in_flight := v_in_flight + 1;
  end if;

  update bitrix_sync.crm_rate_buckets b
     set tokens = greatest(0, v_tokens), refilled_at = v_now, rate_factor = v_factor,
         rate_changed_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;

  return query select v_slot is not null, v_slot, coalesce(v_wait, 0), v_tokens, v_rate, v_in_flight, v_now;
end $$;
comment on function bitrix_sync.acquire_crm_request(text, text, double precision, integer, integer, integer, double precision) is
  'Takes one token and one in-flight slot for an HTTP request to the portal, or says how long to wait (wait_ms). decided_at is the server time of the decision. Shared by every replica (§8).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.release_crm_request(p_slot_id uuid) returns boolean
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id;
  return found;
end $$;
comment on function bitrix_sync.release_crm_request(uuid) is
  'Frees an in-flight slot when its request has a reply or failed. false when the slot had already expired.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- The release that also records that the portal answered: the deployment's view of the portal
-- (sql/limiter/health.sql).
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
    -- A row written within the last second is left alone, and then not even locked; nor is a row
    -- another session holds (an acquire under way): a release never waits for the bucket, and the
    -- next answer stamps it.
    update bitrix_sync.crm_rate_buckets b
       set last_answered_at = v_now
     where b.bucket = (select k.bucket from bitrix_sync.crm_rate_buckets k
                        where k.bucket = p_bucket
                          and (k.last_answered_at is null or k.last_answered_at < v_now - interval '1 second')
                        for update skip locked);
  end if;
  return v_released;
end $$;
comment on function bitrix_sync.release_crm_request(uuid, text, boolean) is
  'Frees an in-flight slot when its request has a reply or failed, as release_crm_request(uuid); p_answered true (the portal answered HTTP 2xx) also records the time on the bucket p_bucket (last_answered_at, at most once a second), where every replica''s readiness reads it. false when the slot had already expired.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.release_crm_request(uuid,text,boolean)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Limiter: the release that also records that the portal answered.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
