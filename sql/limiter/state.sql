-- CRM rate limiter (§8, §9) as status and the pump read it: methods blocked now, and the bucket's state.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.blocked_crm_methods(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
