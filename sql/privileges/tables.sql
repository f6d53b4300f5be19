-- The privilege decision on the catalogue's own table (created by migration 000036).
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.privilege_decisions', array[]::text[], array[]::text[], array[]::text[],
   'The catalogue''s rows, one per object; the admin reads them through role_privileges.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
