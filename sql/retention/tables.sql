-- The privilege decisions (sql/privileges/) on the table of retention/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.retention_sweeps', array[]::text[], array[]::text[], array[]::text[],
   'Where the workflow retention sweep stands; only the retention functions (security definer) read and write it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
