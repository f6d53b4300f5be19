-- Workflows (§7.1, §9): a retry after a failed step, within the horizon counted from the first attempt.

create or replace function bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances)
returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- Intake starts a workflow as soon as it is created; an admin's requeue starts it over.
  select coalesce(p_row.requeued_at, p_row.created_at)
$$;
comment on function bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances) is
  'Internal: where a workflow''s retry horizon starts: its last requeue by an admin, else its creation.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of schedule_workflow_retry: the horizon counts from a requeue.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.schedule_workflow_retry(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns bitrix_sync.workflow_instances
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._workflow_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    perform bitrix_sync._dead_letter('workflow', v_row.id::text, v_row.workflow_type, 'retry_horizon_exceeded',
      v_row.attempt_count, bitrix_sync._workflow_first_attempt(v_row), v_row.id, null, v_row.correlation_id,
      null, null);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.schedule_workflow_retry(uuid, uuid, text, interval) is
  'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at, or the last requeue, + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
