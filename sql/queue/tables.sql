-- The privilege decisions (sql/privileges/) on the table of queue/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'han_app.sync_queue',
   array['SELECT', 'UPDATE (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code, last_error_at, completed_at, cancel_reason, updated_at)'],
   array[]::text[], array['SELECT'],
   'Intents appear through the fold of the App''s journal (fold_intent_journal, security definer); the runtime moves them through the lease functions and never inserts one.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
