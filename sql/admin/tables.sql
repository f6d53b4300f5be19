-- The privilege decisions (sql/privileges/) on the tables and sequences of admin/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, dead_letter_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
   'Audit of the admin functions (security definer) that write it; the Contact a decision named stays out of the admin''s reading.'),
  ('sequence', 'bitrix_sync.admin_actions_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of admin_actions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
