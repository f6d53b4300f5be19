-- The privilege decisions (sql/privileges/) on the table of mapping/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)',
         'UPDATE (status, closed_at, close_reason, workflow_id, held_at, held_crm_updated_at, held_values_hash, hold_released_at, hold_released_by)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions, which also hold and release a link made by phone alone; the user and the Contact of a link never change.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
