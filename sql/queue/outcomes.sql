-- How a leased intent of han_app.sync_queue ends other than completed (§6.1, §9): retried within
-- the horizon, dead-lettered, or cancelled, each under the current lease token.

create or replace function bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_row.id
  returning * into v_row;
  -- The intent's first attempt is its arrival: it is claimed as soon as it is due.
  perform bitrix_sync._dead_letter('sync_queue', v_row.id::text, v_row.task_type, p_error_code,
    v_row.attempt_count, v_row.created_at, null, null, null, null, null);
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue, text) is
  'Internal: moves a held intent to dead_letter and writes its technical DLQ row (first attempt = created_at).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the queue functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.retry_sync_task(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.created_at) then
    return bitrix_sync._dead_letter_sync_task_row(v_row, 'retry_horizon_exceeded');
  end if;
  update han_app.sync_queue
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_sync_task(uuid, uuid, text, interval) is
  'leased -> retry_wait after p_delay with a safe error code; when the retry would fall past the horizon (created_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. The returned status says which. Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return bitrix_sync._dead_letter_sync_task_row(v_row, p_error_code);
end $$;
comment on function bitrix_sync.dead_letter_sync_task(uuid, uuid, text) is
  'leased -> dead_letter and a technical_dead_letters row with the safe code. Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  perform bitrix_sync._check_code(p_reason);
  update han_app.sync_queue
     set status = 'cancelled', cancel_reason = p_reason, completed_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.cancel_sync_task(uuid, uuid, text) is
  'leased -> cancelled with a reason code (e.g. user not eligible). Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
