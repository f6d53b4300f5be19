-- The privilege decisions (sql/privileges/) on the tables and sequences of intake/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, app_writer, note) values
  ('table', 'han_app.user_identity', array['SELECT (id, phone_number, record_status, created_at, updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], 'Identity is App-master; the runtime reads it at send time.'),
  ('table', 'han_app.client_profile',
   array['SELECT (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)',
         'UPDATE (full_name, citizenship, email, source_updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'],
   array['SELECT (user_id)', 'UPDATE (full_name, citizenship, email, source_updated_at)'],
   'Only the CRM-master fields are written (§3.1), by _write_app_crm_master as the App writer: what the App''s owner attaches to the table runs with the writer''s rights. The runtime''s own UPDATE is kept only for the readiness check of the previous release and used by no statement of this one; the next release drops it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, app_writer = excluded.app_writer,
      note = excluded.note;
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'han_app.sync_queue_journal', array['SELECT'], array[]::text[], array['SELECT'],
   'The trigger (security definer) appends and fold_intent_journal (security definer) takes; the runtime and the App may look, neither writes.'),
  ('table', 'bitrix_sync.lock_intake_fold', array[]::text[], array[]::text[], array[]::text[],
   'One intake fold (and one cutover) at a time: fold_intent_journal and perform_cutover lock it.'),
  ('table', 'bitrix_sync.lock_intake_watch', array[]::text[], array[]::text[], array[]::text[],
   'The intake watch: a sleeping loop holds it (watch_intake), the App''s trigger marks its transactions on it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
