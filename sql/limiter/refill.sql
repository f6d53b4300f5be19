-- The token bucket's two formulas, one place for both budgets (acquire_crm_request in acquire.sql,
-- acquire_spare_crm_request in spare.sql): the tokens a bucket holds now, and how far a rate cut by
-- the portal's refusals has climbed back.

create or replace function bitrix_sync._bucket_tokens(
  p_tokens double precision, p_rate double precision, p_cap double precision,
  p_refilled_at timestamptz, p_now timestamptz
) returns double precision
language sql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
  -- What was left, plus the rate for the time since, never above the cap; a clock that went back
  -- adds nothing.
  select least(p_cap, p_tokens + p_rate * greatest(0, extract(epoch from p_now - p_refilled_at)::double precision))
$$;
comment on function bitrix_sync._bucket_tokens(double precision, double precision, double precision, timestamptz, timestamptz) is
  'Internal: the tokens of a bucket at p_now: p_tokens left at p_refilled_at, refilled at p_rate per second, at most p_cap.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._bucket_tokens(double precision,double precision,double precision,timestamp with time zone,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter functions (the runtime calls them as itself); pure arithmetic.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._bucket_rate_factor(
  p_factor double precision, p_recovery_per_sec double precision, p_changed_at timestamptz, p_now timestamptz
) returns double precision
language sql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
  -- The share of the configured rate in force: p_factor at p_changed_at, climbing back by
  -- p_recovery_per_sec, at most the whole rate.
  select least(1.0, p_factor + p_recovery_per_sec * greatest(0, extract(epoch from p_now - p_changed_at)::double precision))
$$;
comment on function bitrix_sync._bucket_rate_factor(double precision, double precision, timestamptz, timestamptz) is
  'Internal: the share of the configured rate a bucket runs at by p_now, after a cut to p_factor at p_changed_at, recovering p_recovery_per_sec per second, at most 1.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._bucket_rate_factor(double precision,double precision,timestamp with time zone,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter functions (the runtime calls them as itself); pure arithmetic.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
