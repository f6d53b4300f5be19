-- The privilege decisions (sql/privileges/) on the tables and sequences of settings/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
