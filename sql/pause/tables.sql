-- The privilege decisions (sql/privileges/) on the tables and sequences of pause/; the table itself is
-- written by the migration that creates it (000039).
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.sync_pauses', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by pause_sync() and resume_sync() (admin); the runtime reads it for the claim gate and the retry horizon.'),
  ('sequence', 'bitrix_sync.sync_pauses_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of sync_pauses.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
