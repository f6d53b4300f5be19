-- Cutover from the stub to full sync (§17): one watermark; intents recorded before it that were
-- still waiting are cancelled with reason initial_full_sync_cutover. Running it again changes nothing.

create or replace function bitrix_sync.perform_cutover(p_actor text)
returns table (cutover_watermark timestamptz, cancelled_count integer, already_done boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.cutover;
  v_count integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'cutover needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  -- Serialize concurrent callers; the first one wins, the others see its result.
  perform pg_advisory_xact_lock(hashtext('bitrix_sync.perform_cutover'));
  select * into v_row from bitrix_sync.cutover;
  if found then
    return query select v_row.cutover_watermark, v_row.cancelled_count, true;
    return;
  end if;
  with cancelled as (
    update han_app.sync_queue q
       set status = 'cancelled', cancel_reason = 'initial_full_sync_cutover', completed_at = now(), updated_at = now()
     where q.status in ('pending', 'retry_wait')
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
  'Records cutover_watermark (now) and cancels earlier pending/retry_wait contact intents with cancel_reason initial_full_sync_cutover (§17 steps 3-4). Idempotent: a second call returns the first result and changes nothing.';

-- An operator's step (docs/admin.md#cutover), never the service's: the admin role only.
revoke all on function bitrix_sync.perform_cutover(text) from public, bitrix_sync_user, han_app_user;
grant execute on function bitrix_sync.perform_cutover(text) to bitrix_sync_admin;
