-- The privilege decisions on the project's two schemas (the schemas themselves are created by the
-- migrations).
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, app_writer, note) values
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], array[]::text[],
   'The project''s schema; the App has no business in it, nor has the App writer (what runs with its rights cannot even name a function here).'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], array['USAGE'],
   'The App''s schema; the admin reaches the queue only through status_queue; the App writer reaches client_profile.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, app_writer = excluded.app_writer,
      note = excluded.note;
