-- CRM rate limiter (§8, §9): what the portal's replies teach it. A refusal for rate cuts the rate
-- and starts a cool-down, answers bring the rate back, a method blocked for operating time waits
-- its block out, and the portal's own operating-time figures are kept per method.

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
  v_factor := bitrix_sync._bucket_rate_factor(v_row.rate_factor, p_recovery_per_sec, v_row.rate_changed_at, v_now);
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
  v_factor := bitrix_sync._bucket_rate_factor(v_row.rate_factor, p_recovery_per_sec, v_row.rate_changed_at, v_now);
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.note_crm_answered(text,double precision,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.note_method_blocked(text,text,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.note_crm_operating(text,text[],double precision[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
