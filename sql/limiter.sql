-- CRM rate limiter (§8, §9), shared by every replica through PostgreSQL: one bucket row per portal,
-- refilled and taken under its row lock in acquire_crm_request(), and in-flight slots that expire. The TypeScript side
-- (src/crm/limiter.ts) calls acquire_crm_request() before each HTTP request and
-- release_crm_request() after it; replies feed note_rate_limited(), note_method_blocked() and
-- note_crm_operating(). Settings (rate, burst, in-flight cap) come in as parameters, read by the
-- caller from bitrix_sync.active_settings(). Re-runnable. Errors: SQLSTATE BS010..BS012. Who may call
-- what: sql/privileges.sql.

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

  v_factor := least(1.0, v_row.rate_factor
                        + p_recovery_per_sec * greatest(0, extract(epoch from v_now - v_row.rate_changed_at)));
  v_rate := p_refill_per_sec * v_factor;
  v_tokens := least(p_burst::double precision,
                    v_row.tokens + v_rate * greatest(0, extract(epoch from v_now - v_row.refilled_at)));

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

create or replace function bitrix_sync.release_crm_request(p_slot_id uuid) returns boolean
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id;
  return found;
end $$;
comment on function bitrix_sync.release_crm_request(uuid) is
  'Frees an in-flight slot when its request has a reply or failed. false when the slot had already expired.';

create or replace function bitrix_sync.note_rate_limited(
  p_bucket text,
  p_decrease double precision,
  p_min_factor double precision,
  p_cooldown_ms integer,
  p_recovery_per_sec double precision
) returns double precision
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if p_decrease is null or p_decrease <= 0 or p_decrease > 1 or p_min_factor is null or p_min_factor <= 0
     or p_min_factor > 1 or p_cooldown_ms is null or p_cooldown_ms < 0 or p_recovery_per_sec is null
     or p_recovery_per_sec < 0 then
    raise exception 'rate cut parameters out of range: decrease %, min factor %, cool-down % ms',
      p_decrease, p_min_factor, p_cooldown_ms
      using errcode = 'BS010', hint = 'decrease and min factor are in (0, 1]; the cool-down is not negative.';
  end if;
  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (p_bucket, 0, clock_timestamp())
  on conflict (bucket) do nothing;
  select * into strict v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  v_now := clock_timestamp();
  v_factor := least(1.0, v_row.rate_factor
                        + p_recovery_per_sec * greatest(0, extract(epoch from v_now - v_row.rate_changed_at)));
  -- Both in-flight requests often come back refused together: cut once per cool-down window.
  if v_row.throttled_until is not null and v_row.throttled_until > v_now then
    return v_row.rate_factor;
  end if;
  v_factor := greatest(p_min_factor, v_factor * p_decrease);
  update bitrix_sync.crm_rate_buckets b
     set rate_factor = v_factor, rate_changed_at = v_now, tokens = 0, refilled_at = v_now,
         throttled_until = v_now + make_interval(secs => p_cooldown_ms / 1000.0),
         rate_limited_count = b.rate_limited_count + 1, updated_at = v_now
   where b.bucket = p_bucket;
  return v_factor;
end $$;
comment on function bitrix_sync.note_rate_limited(text, double precision, double precision, integer, double precision) is
  'QUERY_LIMIT_EXCEEDED: empties the bucket, pauses it for the cool-down and multiplies the rate by p_decrease; acquire_crm_request() lets it climb back linearly. Returns the new rate factor.';

create or replace function bitrix_sync.note_crm_answered(
  p_bucket text,
  p_increase double precision,
  p_recovery_per_sec double precision
) returns double precision
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if p_increase is null or p_increase < 1 or p_recovery_per_sec is null or p_recovery_per_sec < 0 then
    raise exception 'rate increase out of range: increase %, recovery % per second', p_increase, p_recovery_per_sec
      using errcode = 'BS010', hint = 'The increase is at least 1; the recovery is not negative.';
  end if;
  select * into v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  if not found then
    return 1.0;
  end if;
  v_now := clock_timestamp();
  v_factor := least(1.0, v_row.rate_factor
                        + p_recovery_per_sec * greatest(0, extract(epoch from v_now - v_row.rate_changed_at)));
  -- A refusal inside its cool-down is fresher news than this reply: the cut stands.
  if v_factor >= 1.0 or (v_row.throttled_until is not null and v_row.throttled_until > v_now) then
    return v_factor;
  end if;
  v_factor := least(1.0, v_factor * p_increase);
  update bitrix_sync.crm_rate_buckets b
     set rate_factor = v_factor, rate_changed_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;
  return v_factor;
end $$;
comment on function bitrix_sync.note_crm_answered(text, double precision, double precision) is
  'The portal answered a request sent while the rate was cut: the limit has passed, so the rate factor is multiplied by p_increase (up to 1) instead of only climbing back linearly. Nothing changes inside a refusal''s cool-down. Returns the new rate factor.';

create or replace function bitrix_sync.note_method_blocked(
  p_bucket text, p_method text, p_until timestamptz default null
) returns timestamptz
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := clock_timestamp();
  v_reset timestamptz;
  v_old timestamptz;
  v_until timestamptz;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('method', p_method);
  select m.operating_reset_at, m.blocked_until into v_reset, v_old
    from bitrix_sync.crm_method_blocks m where m.bucket = p_bucket and m.method = p_method for update;
  -- The refusal carries no timing: use the caller's estimate, the last reset time a reply of this
  -- method reported, or a minute, whichever is latest (reference §2).
  v_until := greatest(coalesce(p_until, v_now + interval '1 minute'),
                      case when v_reset > v_now then v_reset end,
                      case when v_old > v_now then v_old end);
  insert into bitrix_sync.crm_method_blocks as m (bucket, method, blocked_until, updated_at)
  values (p_bucket, p_method, v_until, v_now)
  on conflict (bucket, method) do update set blocked_until = excluded.blocked_until, updated_at = excluded.updated_at;
  return v_until;
end $$;
comment on function bitrix_sync.note_method_blocked(text, text, timestamptz) is
  'OPERATION_TIME_LIMIT: blocks one REST method (only that one) until the later of p_until and its last operating_reset_at. Returns the end of the block.';

create or replace function bitrix_sync.note_crm_operating(
  p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamptz[]
) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := clock_timestamp();
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if coalesce(cardinality(p_methods), 0) <> coalesce(cardinality(p_operating), 0)
     or coalesce(cardinality(p_methods), 0) <> coalesce(cardinality(p_reset_at), 0) then
    raise exception 'operating samples must have one method, one operating time and one reset time each'
      using errcode = 'BS011', hint = 'Pass three arrays of the same length.';
  end if;
  for i in 1 .. coalesce(cardinality(p_methods), 0) loop
    perform bitrix_sync._check_limiter_name('method', p_methods[i]);
    insert into bitrix_sync.crm_method_blocks as m (bucket, method, operating, operating_reset_at, updated_at)
    values (p_bucket, p_methods[i], greatest(0, p_operating[i]), p_reset_at[i], v_now)
    on conflict (bucket, method) do update
      set operating = excluded.operating,
          operating_reset_at = coalesce(excluded.operating_reset_at, m.operating_reset_at),
          updated_at = excluded.updated_at;
  end loop;
end $$;
comment on function bitrix_sync.note_crm_operating(text, text[], double precision[], timestamptz[]) is
  'Records time.operating and time.operating_reset_at per REST method from replies, so a later OPERATION_TIME_LIMIT knows when the method frees.';

create or replace function bitrix_sync.blocked_crm_methods(p_bucket text)
returns table (method text, blocked_until timestamptz)
language sql stable set search_path = pg_catalog, pg_temp as $$
  select m.method, m.blocked_until
    from bitrix_sync.crm_method_blocks m
   where m.bucket = p_bucket and m.blocked_until > clock_timestamp()
   order by m.method
$$;
comment on function bitrix_sync.blocked_crm_methods(text) is
  'REST methods blocked by OPERATION_TIME_LIMIT right now, with the end of each block. The pump holds their commands back.';

create or replace function bitrix_sync.crm_limiter_state(p_bucket text)
returns table (tokens double precision, rate_factor double precision, in_flight integer,
               throttled_until timestamptz, rate_limited_count bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select b.tokens, b.rate_factor,
         (select count(*)::integer from bitrix_sync.crm_inflight_slots s
           where s.bucket = b.bucket and s.expires_at > clock_timestamp()),
         case when b.throttled_until > clock_timestamp() then b.throttled_until end,
         b.rate_limited_count
    from bitrix_sync.crm_rate_buckets b
   where b.bucket = p_bucket
$$;
comment on function bitrix_sync.crm_limiter_state(text) is
  'Limiter state for /internal/sync/v1/status (§14): tokens as last stored, rate factor, live in-flight slots, cool-down end. Security definer so the admin role can read it without table grants.';

-- The convergence audit's share of the portal (sql/convergence_audit.sql; docs/crm-client.md,
-- "Spare budget"). It draws from the same token bucket as the sync path, but only what that path
-- does not need: a token is taken only from a full bucket, whose refill nobody is using (a bucket
-- the sync path draws on is below its burst; at most one token of a burst is ever missing when sync
-- traffic starts), never while the rate is cut or a refusal's cool-down runs, never while the sync
-- path has all its in-flight slots, and never while a sync caller holds the bucket's row this
-- instant (SKIP LOCKED: the audit does not even wait for the row). While sync traffic uses the
-- portal's whole budget, the audit gets nothing and falls behind (bitrix_sync_audit_overdue_links). On top of that a second bucket, `<bucket>#spare`, refills at p_share of the rate with room
-- for one request, so the audit's requests stay under that share whatever the traffic. Its one
-- in-flight slot is kept under the spare bucket, so it never takes one of the sync path's slots.
create or replace function bitrix_sync.acquire_spare_crm_request(
  p_bucket text,
  p_holder text,
  p_refill_per_sec double precision,
  p_burst integer,
  p_max_in_flight integer,
  p_share double precision,
  p_slot_ttl_ms integer,
  p_recovery_per_sec double precision
) returns table (granted boolean, slot_id uuid, wait_ms integer)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_spare_bucket text;
  v_now timestamptz;
  v_main bitrix_sync.crm_rate_buckets;
  v_spare bitrix_sync.crm_rate_buckets;
  v_factor double precision;
  v_rate double precision;
  v_tokens double precision;
  v_reserve double precision;
  v_share_rate double precision;
  v_share_tokens double precision;
  v_in_flight integer;
  v_slot uuid;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('holder', p_holder);
  if p_refill_per_sec is null or p_refill_per_sec <= 0 or p_burst is null or p_burst < 1
     or p_max_in_flight is null or p_max_in_flight < 1 or p_slot_ttl_ms is null or p_slot_ttl_ms < 1
     or p_share is null or p_share <= 0 or p_share > 1 or p_recovery_per_sec is null or p_recovery_per_sec < 0 then
    raise exception 'spare limiter settings out of range: refill %, burst %, max in flight %, share %, slot ttl % ms',
      p_refill_per_sec, p_burst, p_max_in_flight, p_share, p_slot_ttl_ms
      using errcode = 'BS010',
            hint = 'Check limiter.* and audit.budget_share (a share in (0, 1]) in bitrix_sync.settings.';
  end if;
  v_spare_bucket := left(p_bucket, 194) || '#spare';
  -- Spare is what would overflow: the bucket must be full before the audit takes from it.
  v_reserve := p_burst - 1;

  select * into v_main from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update skip locked;
  if not found then
    if exists (select 1 from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket) then
      -- A sync request is taking a token right now: the portal is busy, come back later.
      return query select false, null::uuid, 100;
      return;
    end if;
    insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
    values (p_bucket, p_burst, clock_timestamp())
    on conflict (bucket) do nothing;
    select * into v_main from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update skip locked;
    if not found then
      return query select false, null::uuid, 100;
      return;
    end if;
  end if;
  v_now := clock_timestamp();

  if v_main.throttled_until is not null and v_main.throttled_until > v_now then
    return query select false, null::uuid,
      greatest(100, ceil(extract(epoch from v_main.throttled_until - v_now) * 1000))::integer;
    return;
  end if;
  v_factor := least(1.0, v_main.rate_factor
                        + p_recovery_per_sec * greatest(0, extract(epoch from v_now - v_main.rate_changed_at)));
  if v_factor < 0.999 then
    -- The portal refused recently and the rate has not climbed back: nothing is spare.
    return query select false, null::uuid, 1000;
    return;
  end if;
  v_rate := p_refill_per_sec * v_factor;
  v_tokens := least(p_burst::double precision,
                    v_main.tokens + v_rate * greatest(0, extract(epoch from v_now - v_main.refilled_at)));
  select count(*)::integer into v_in_flight
    from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket and s.expires_at > v_now;
  if v_in_flight >= p_max_in_flight then
    return query select false, null::uuid, 100;
    return;
  end if;
  if v_tokens < v_reserve + 1 then
    return query select false, null::uuid,
      least(60000, greatest(10, ceil((v_reserve + 1 - v_tokens) / v_rate * 1000)))::integer;
    return;
  end if;

  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (v_spare_bucket, 1, v_now)
  on conflict (bucket) do nothing;
  select * into strict v_spare from bitrix_sync.crm_rate_buckets b where b.bucket = v_spare_bucket for update;
  delete from bitrix_sync.crm_inflight_slots s where s.bucket = v_spare_bucket and s.expires_at <= v_now;
  if exists (select 1 from bitrix_sync.crm_inflight_slots s where s.bucket = v_spare_bucket) then
    return query select false, null::uuid, 100;
    return;
  end if;
  v_share_rate := p_refill_per_sec * p_share;
  v_share_tokens := least(1.0, v_spare.tokens + v_share_rate * greatest(0, extract(epoch from v_now - v_spare.refilled_at)));
  if v_share_tokens < 1 then
    return query select false, null::uuid,
      least(600000, greatest(10, ceil((1 - v_share_tokens) / v_share_rate * 1000)))::integer;
    return;
  end if;

  update bitrix_sync.crm_rate_buckets b
     set tokens = v_tokens - 1, refilled_at = v_now, rate_factor = v_factor, rate_changed_at = v_now,
         updated_at = v_now
   where b.bucket = p_bucket;
  update bitrix_sync.crm_rate_buckets b
     set tokens = v_share_tokens - 1, refilled_at = v_now, updated_at = v_now
   where b.bucket = v_spare_bucket;
  insert into bitrix_sync.crm_inflight_slots as s (bucket, holder, acquired_at, expires_at)
  values (v_spare_bucket, p_holder, v_now, v_now + make_interval(secs => p_slot_ttl_ms / 1000.0))
  returning s.slot_id into v_slot;
  return query select true, v_slot, 0;
end $$;
comment on function bitrix_sync.acquire_spare_crm_request(text, text, double precision, integer, integer, double precision, integer, double precision) is
  'The convergence audit''s (and diagnose''s) permit for one HTTP request from spare budget only: granted when the shared bucket p_bucket is full (its refill unused), the rate is not cut, no cool-down runs, the sync path has a free in-flight slot and holds no lock on the bucket, and the spare bucket (<bucket>#spare, refilled at p_share of the rate, room for one request, one request in flight) has a token. Otherwise granted is false and wait_ms says when to ask again. Security definer: the admin role (diagnose) calls it without table rights.';

create or replace function bitrix_sync.release_spare_crm_request(p_slot_id uuid) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id and s.bucket like '%#spare';
  return found;
end $$;
comment on function bitrix_sync.release_spare_crm_request(uuid) is
  'Frees the spare in-flight slot of acquire_spare_crm_request() when its request has a reply or failed (only spare slots). false when the slot had already expired.';
