-- The privilege decisions (sql/privileges/) on the tables and sequences of metrics/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.metric_event_totals', array[]::text[], array[]::text[], array[]::text[],
   'Counter totals; only metrics_snapshot() (security definer) folds into and reads them.'),
  ('table', 'bitrix_sync.metric_events', array[]::text[], array[]::text[], array[]::text[],
   'Counted events; appended by the security definer _900 triggers whoever makes the change.'),
  ('table', 'bitrix_sync.lock_metrics_fold', array[]::text[], array[]::text[], array[]::text[],
   'One metrics fold at a time (metrics_snapshot).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
