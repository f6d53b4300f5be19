-- Leases on han_app.sync_queue (§6.1) once claimed (claim.sql): extended, completed or released only
-- under the current lease token (fencing).

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue set locked_until = now() + p_lease, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_sync_task_lease(uuid, uuid, interval) is
  'Extends a held lease. Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_sync_task(uuid, uuid) is
  'leased -> processed under the current lease token; a stale holder is refused (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row han_app.sync_queue;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue
     set status = 'pending', locked_by = null, locked_until = null, lease_token = null,
         attempt_count = greatest(attempt_count - 1, 0), updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_sync_task(uuid, uuid) is
  'leased -> pending without spending an attempt (shutdown, paused sync). Refuses a stale token (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
