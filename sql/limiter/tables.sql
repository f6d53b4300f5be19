-- The privilege decisions (sql/privileges/) on the tables and sequences of limiter/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),
  ('table', 'bitrix_sync.spare_budget_use', array[]::text[], array['SELECT'], array[]::text[],
   'Who used the spare budget and when (acquire_spare_crm_request, security definer, writes it); the admin reads it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
