-- The privilege decisions (sql/privileges/) on the table of rebind/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
