-- The deployment's view of the portal (§14): when the portal last answered any replica. Readiness
-- (crm_stale) judges the deployment, not the replica: a replica that was idle through an outage has
-- only failures of its own to go by, and would stay degraded (and keep BitrixSyncCrmOutage firing)
-- until a request of its own succeeded. Every request already releases its limiter slot after the
-- reply; that release (release_crm_request(uuid, text, boolean), sql/limiter/acquire.sql) carries the
-- outcome and stamps the bucket's row, the one row per portal every replica shares, at most once a
-- second: no extra round trip, and no more than one extra row write a second however busy the portal
-- is.

create or replace function bitrix_sync.crm_last_answered_at(p_bucket text) returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  select b.last_answered_at from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket
$$;
comment on function bitrix_sync.crm_last_answered_at(text) is
  'When the portal (bucket p_bucket, its host) last answered a request of any replica with HTTP 2xx; null before the first, or when no request went yet. Readiness and the status document read it.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.crm_last_answered_at(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'When the portal last answered any replica, for readiness and status.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

