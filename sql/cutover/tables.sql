-- The privilege decisions (sql/privileges/) on the table of cutover/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
