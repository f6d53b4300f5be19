-- Enqueue trigger (§6.2): App changes that matter to the CRM become han_app.sync_queue intents in
-- the App's own transaction, so a rolled-back business update leaves no intent behind.

create or replace function han_app.enqueue_contact_sync() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_new jsonb := to_jsonb(new);
  v_old jsonb;
  v_user_id uuid;
  v_task text;
  v_reason text;
  v_subject text := case tg_table_name when 'user_identity' then 'identity' else 'profile' end;
begin
  -- bitrix-sync writes CRM-master fields with SET LOCAL han.sync_suppress = 'true': no echo.
  if coalesce(current_setting('han.sync_suppress', true), '') = 'true' then
    return null;
  end if;

  -- entity_id is always user_identity.id, also for profile rows.
  v_user_id := case tg_table_name when 'user_identity' then (v_new ->> 'id')::uuid
                                  else (v_new ->> 'user_id')::uuid end;

  if tg_op = 'INSERT' then
    if v_new ->> 'record_status' = 'active' then
      v_task := 'contact.map_or_create';
      v_reason := v_subject || '_created';
    end if;
  else
    v_old := to_jsonb(old);
    if v_old ->> 'record_status' = 'active' and v_new ->> 'record_status' <> 'active' then
      v_task := 'contact.deactivate';
      v_reason := v_subject || '_deactivated';
    elsif v_old ->> 'record_status' <> 'active' and v_new ->> 'record_status' = 'active' then
      v_task := 'contact.map_or_create';
      v_reason := v_subject || '_reactivated';
    elsif tg_table_name = 'user_identity'
          and v_new ->> 'record_status' = 'active'
          and (v_new ->> 'phone_number') is distinct from (v_old ->> 'phone_number') then
      v_task := 'contact.update';
      v_reason := 'identity_phone_changed';
    end if;
    -- Anything else (CRM-master fields, foreign_phone, timestamps, no-op updates) creates nothing.
  end if;

  if v_task is null then
    return null;
  end if;

  -- One active row per (task, user): a newer intent coalesces into it. If a worker holds the row,
  -- the newer intent takes it back to pending, which fences the holder: its completion is refused
  -- and the row is processed again with the newest state.
  insert into han_app.sync_queue as q (task_type, entity_type, entity_id, dedup_key, payload_json, status, next_attempt_at)
  values (v_task, 'user', v_user_id, v_task || ':user:' || v_user_id::text,
          jsonb_build_object(
            'schema_version', 1,
            'user_id', v_user_id,
            'reason', v_reason,
            'source_updated_at', to_char((v_new ->> 'updated_at')::timestamptz at time zone 'UTC',
                                         'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
          'pending', now())
  on conflict (dedup_key) where status in ('pending', 'leased', 'retry_wait')
  do update set payload_json = excluded.payload_json,
                status = 'pending',
                next_attempt_at = least(q.next_attempt_at, now()),
                locked_by = null,
                locked_until = null,
                lease_token = null,
                updated_at = now();

  -- Wake-up only; workers also poll (§8). The payload names no user.
  perform pg_notify('bitrix_sync_queue', v_task);
  return null;
end $$;
comment on function han_app.enqueue_contact_sync() is
  'AFTER INSERT/UPDATE trigger on user_identity and client_profile (§6.2): active insert or return to active -> contact.map_or_create; leaving active -> contact.deactivate; phone change -> contact.update. Skips when han.sync_suppress = ''true'' and on changes of untracked or CRM-master fields. Coalesces per (task, user) and NOTIFYs bitrix_sync_queue.';

drop trigger if exists _500_enqueue_contact_sync on han_app.user_identity;
create trigger _500_enqueue_contact_sync
  after insert or update of phone_number, record_status on han_app.user_identity
  for each row execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync on han_app.user_identity is
  'Records contact.map_or_create / contact.update / contact.deactivate intents (§6.2).';

drop trigger if exists _500_enqueue_contact_sync on han_app.client_profile;
create trigger _500_enqueue_contact_sync
  after insert or update of record_status on han_app.client_profile
  for each row execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync on han_app.client_profile is
  'Records contact.map_or_create / contact.deactivate intents when the profile status changes (§6.2).';
