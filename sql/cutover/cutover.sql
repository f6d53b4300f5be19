-- Cutover from the stub to full sync (§17): one watermark; intents recorded before it that were
-- still waiting are cancelled with reason initial_full_sync_cutover. Running it again changes nothing.
-- Until it has run, every claim function returns nothing (the gate below): no replica, CLI worker
-- or psql session can process stub-era intents, whatever its configuration says. Receivers still
-- record webhooks; they wait in the inbox.

create or replace function bitrix_sync.cutover_performed() returns boolean
language sql stable parallel safe set search_path = pg_catalog, pg_temp as $$
  select exists (select 1 from bitrix_sync.cutover)
$$;
comment on function bitrix_sync.cutover_performed() is
  'The processing gate (§17): true once perform_cutover() has run. The claim functions return nothing while it is false; readiness reports cutover_not_performed.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.perform_cutover(p_actor text)
returns table (cutover_watermark timestamptz, cancelled_count integer, already_done boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.cutover;
  v_count integer;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'cutover needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  -- Serialize concurrent callers; the first one wins, the others see its result. The fold's lock
  -- (its fold below takes it anyway), which no other role can take (sql/enqueue.sql).
  lock table bitrix_sync.lock_intake_fold in share update exclusive mode;
  select * into v_row from bitrix_sync.cutover;
  if found then
    return query select v_row.cutover_watermark, v_row.cancelled_count, true;
    return;
  end if;
  -- Every intent the App has recorded so far into the queue first, so that the cancellation sees it.
  while bitrix_sync.fold_intent_journal(100000, true) = 100000 loop
  end loop;
  with cancelled as (
    update han_app.sync_queue q
       set status = 'cancelled', cancel_reason = 'initial_full_sync_cutover', completed_at = now(), updated_at = now(),
           locked_by = null, locked_until = null, lease_token = null
     -- leased: held by a worker of a release without the gate; its completion is refused (BS001).
     where q.status in ('pending', 'retry_wait', 'leased')
       and q.task_type like 'contact.%'
       and q.created_at < now()
    returning 1
  )
  select count(*) into v_count from cancelled;
  insert into bitrix_sync.cutover (cutover_watermark, cancelled_count, performed_by)
  values (now(), v_count, btrim(p_actor))
  returning * into v_row;
  return query select v_row.cutover_watermark, v_row.cancelled_count, false;
end $$;
comment on function bitrix_sync.perform_cutover(text) is
  'Admin entry point (§17 steps 3-4): records cutover_watermark (now), cancels earlier pending/retry_wait/leased contact intents with cancel_reason initial_full_sync_cutover, and opens the processing gate. Idempotent: a second call returns the first result and changes nothing.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.perform_cutover(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The one-time cutover (§17); it also opens the processing gate.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
