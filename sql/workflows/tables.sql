-- The privilege decisions (sql/privileges/) on the table of workflows/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash, trace_context)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at, trace_context, updated_at)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
