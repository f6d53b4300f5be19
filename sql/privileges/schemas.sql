-- The privilege decisions on the project's two schemas (the schemas themselves are created by the
-- migrations).
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], 'The project''s schema; the App has no business in it.'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], 'The App''s schema; the admin reaches the queue only through status_queue.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
