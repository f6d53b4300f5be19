-- CRM rate limiter (§8, §9): the spare budget, what the sync path leaves unused, for the
-- convergence audit and npm run diagnose.

-- The convergence audit's share of the portal (sql/audit/; docs/crm-client.md,
-- "Spare budget"). It draws from the same token bucket as the sync path, but only what that path
-- does not need: a token is taken only from a full bucket, whose refill nobody is using (a bucket
-- the sync path draws on is below its burst; at most one token of a burst is ever missing when sync
-- traffic starts), never while the rate is cut or a refusal's cool-down runs, never while the sync
-- path has all its in-flight slots, and never while a sync caller holds the bucket's row this
-- instant (SKIP LOCKED: the audit does not even wait for the row). While sync traffic uses the
-- portal's whole budget, the audit gets nothing and falls behind (bitrix_sync_audit_overdue_links).
-- On top of that a second bucket, `<bucket>#spare`, refills at audit.budget_share of the rate with
-- room for one request, so the audit's requests stay under that share whatever the traffic. Its one
-- in-flight slot is kept under the spare bucket, so it never takes one of the sync path's slots.
--
-- Its admin callers (npm run diagnose) are not trusted with the limiter: the rate, burst, in-flight
-- cap and share come from the active settings, the slot's lifetime and the rate's recovery are the
-- server's (SPARE_SLOT_TTL and SPARE_RECOVERY_PER_SEC below; src/crm/limiter.ts
-- DEFAULT_ADAPTIVE.recoveryPerSec is the same number), and nothing here writes the rate
-- factor: a caller can neither undo a cut nor hold the slot longer than two minutes. Every slot
-- granted is counted per day, login and holder in spare_budget_use.
create or replace function bitrix_sync.acquire_spare_crm_request(p_bucket text, p_holder text)
returns table (granted boolean, slot_id uuid, wait_ms integer)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  -- Longer than any HTTP request may take (BITRIX_SYNC_HTTP_TIMEOUT_SEC is at most 60).
  SPARE_SLOT_TTL constant interval := interval '120 seconds';
  -- How fast the rate climbs back after a cut (src/crm/limiter.ts DEFAULT_ADAPTIVE.recoveryPerSec).
  SPARE_RECOVERY_PER_SEC constant double precision := 0.05;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
  v_burst integer := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::integer;
  v_max_in_flight integer := (bitrix_sync._active_setting('limiter.max_in_flight') #>> '{}')::integer;
  v_share double precision := (bitrix_sync._active_setting('audit.budget_share') #>> '{}')::double precision;
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
  v_spare_bucket := left(p_bucket, 194) || '#spare';
  -- Spare is what would overflow: the bucket must be full before the audit takes from it.
  v_reserve := v_burst - 1;

  select * into v_main from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update skip locked;
  if not found then
    if exists (select 1 from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket) then
      -- A sync request is taking a token right now: the portal is busy, come back later.
      return query select false, null::uuid, 100;
      return;
    end if;
    insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
    values (p_bucket, v_burst, clock_timestamp())
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
  v_factor := bitrix_sync._bucket_rate_factor(v_main.rate_factor, SPARE_RECOVERY_PER_SEC, v_main.rate_changed_at, v_now);
  if v_factor < 0.999 then
    -- The portal refused recently and the rate has not climbed back: nothing is spare.
    return query select false, null::uuid, 1000;
    return;
  end if;
  v_rate := v_refill * v_factor;
  v_tokens := bitrix_sync._bucket_tokens(v_main.tokens, v_rate, v_burst, v_main.refilled_at, v_now);
  select count(*)::integer into v_in_flight
    from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket and s.expires_at > v_now;
  if v_in_flight >= v_max_in_flight then
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
  v_share_rate := v_refill * v_share;
  v_share_tokens := bitrix_sync._bucket_tokens(v_spare.tokens, v_share_rate, 1.0, v_spare.refilled_at, v_now);
  if v_share_tokens < 1 then
    return query select false, null::uuid,
      least(600000, greatest(10, ceil((1 - v_share_tokens) / v_share_rate * 1000)))::integer;
    return;
  end if;

  -- The token only: the rate factor and the time it changed stay the sync path's to write.
  update bitrix_sync.crm_rate_buckets b
     set tokens = v_tokens - 1, refilled_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;
  update bitrix_sync.crm_rate_buckets b
     set tokens = v_share_tokens - 1, refilled_at = v_now, updated_at = v_now
   where b.bucket = v_spare_bucket;
  insert into bitrix_sync.crm_inflight_slots as s (bucket, holder, acquired_at, expires_at)
  values (v_spare_bucket, p_holder, v_now, v_now + SPARE_SLOT_TTL)
  returning s.slot_id into v_slot;
  -- Who used the spare budget, and when: one row per day, login and holder.
  insert into bitrix_sync.spare_budget_use as u (day, db_user, holder, bucket, grants, first_at, last_at)
  values (v_now::date, session_user, p_holder, p_bucket, 1, v_now, v_now)
  on conflict (day, db_user, holder, bucket) do update
    set grants = u.grants + 1, last_at = excluded.last_at;
  return query select true, v_slot, 0;
end $$;
comment on function bitrix_sync.acquire_spare_crm_request(text, text) is
  'The convergence audit''s (and diagnose''s) permit for one HTTP request from spare budget only: granted when the shared bucket p_bucket is full (its refill unused), the rate is not cut, no cool-down runs, the sync path has a free in-flight slot and holds no lock on the bucket, and the spare bucket (<bucket>#spare, refilled at audit.budget_share of the rate, room for one request, one request in flight) has a token. The rate, burst, in-flight cap and share are the active settings'', the slot lasts 120 s; the rate factor is never written here. Otherwise granted is false and wait_ms says when to ask again. Each grant is counted in spare_budget_use (day, login, holder). Security definer: the admin role (diagnose) calls it without table rights.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.acquire_spare_crm_request(text,text)',
   array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Limiter, spare budget only (security definer): the convergence audit, and npm run diagnose as the admin; the limiter''s numbers are the server''s.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- The previous release's form: the caller's limiter numbers are ignored.
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
language sql security definer set search_path = pg_catalog, pg_temp as $$
  select a.granted, a.slot_id, a.wait_ms from bitrix_sync.acquire_spare_crm_request(p_bucket, p_holder) a
$$;
comment on function bitrix_sync.acquire_spare_crm_request(text, text, double precision, integer, integer, double precision, integer, double precision) is
  'The previous release''s form of acquire_spare_crm_request(text, text), kept for it: the limiter numbers it passes (rate, burst, in-flight cap, share, slot lifetime, recovery) are ignored; the settings and the server decide.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.acquire_spare_crm_request(text,text,double precision,integer,integer,double precision,integer,double precision)',
   array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'The previous release''s spare-budget permit; ignores the caller''s limiter numbers.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.release_spare_crm_request(p_slot_id uuid) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id and s.bucket like '%#spare';
  return found;
end $$;
comment on function bitrix_sync.release_spare_crm_request(uuid) is
  'Frees the spare in-flight slot of acquire_spare_crm_request() when its request has a reply or failed (only spare slots). false when the slot had already expired.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.release_spare_crm_request(uuid)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Limiter: frees a spare slot (security definer, spare slots only).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
