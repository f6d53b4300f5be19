-- Enqueue trigger (§6.2): App changes that matter to the CRM become han_app.sync_queue intents in
-- the App's own transaction, so a rolled-back business update leaves no intent behind.
--
-- Lean on the App's writes (issue 14; docs/performance.md, "Intent writes"):
-- - The triggers' WHEN clauses keep every write that changes no tracked field (no-op updates
--   included) out of PL/pgSQL. They are short on purpose: PostgreSQL parses a trigger's WHEN (and a
--   table's CHECK constraints) again for every statement, so a long one costs every App update.
-- - The function only names the intent and writes it: no whole-row JSON, one INSERT … ON CONFLICT
--   that coalesces into the user's active intent of the same task.
-- - The wake-up NOTIFY is sent only while a sync loop is asleep waiting for intents (it holds the
--   intake watch, bitrix_sync.watch_intake()). PostgreSQL serialises the commits of notifying
--   transactions, so a NOTIFY per App transaction would queue the App's commits one behind the other
--   while the loop is busy anyway; see watch_intake() for why no intent is missed.

create or replace function han_app.enqueue_contact_sync() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_user_id uuid;
  v_task text;
  v_reason text;
  v_subject text := case tg_table_name when 'user_identity' then 'identity' else 'profile' end;
begin
  -- bitrix-sync writes CRM-master fields with SET LOCAL han.sync_suppress = 'true': no echo.
  if current_setting('han.sync_suppress', true) = 'true' then
    return null;
  end if;

  if tg_op = 'INSERT' then
    if new.record_status <> 'active' then
      return null;
    end if;
    v_task := 'contact.map_or_create';
    v_reason := v_subject || '_created';
  elsif old.record_status = 'active' and new.record_status <> 'active' then
    v_task := 'contact.deactivate';
    v_reason := v_subject || '_deactivated';
  elsif old.record_status <> 'active' and new.record_status = 'active' then
    v_task := 'contact.map_or_create';
    v_reason := v_subject || '_reactivated';
  elsif tg_argv[0] = 'phone' and new.record_status = 'active' then
    -- Only _500_enqueue_contact_sync_update on user_identity passes 'phone'; its WHEN clause fires
    -- for a phone_number or record_status that changed (IS DISTINCT FROM), and the status did not
    -- enter or leave active, so the phone changed.
    v_task := 'contact.update';
    v_reason := 'identity_phone_changed';
  else
    -- CRM-master fields, foreign_phone, timestamps, no-op updates: nothing.
    return null;
  end if;

  -- entity_id is always user_identity.id, also for profile rows.
  if tg_table_name = 'user_identity' then
    v_user_id := new.id;
  else
    v_user_id := (to_jsonb(new) ->> 'user_id')::uuid;
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
            'source_updated_at', to_char(new.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
          'pending', now())
  on conflict (dedup_key) where status in ('pending', 'leased', 'retry_wait')
  do update set payload_json = excluded.payload_json,
                status = 'pending',
                next_attempt_at = least(q.next_attempt_at, now()),
                locked_by = null,
                locked_until = null,
                lease_token = null,
                updated_at = now();

  -- Wake-up only; workers also poll (§8). The payload names no user. A sync loop asleep on the
  -- queue holds the intake watch exclusively, so the shared try fails exactly then. Otherwise this
  -- transaction now holds the watch shared until it ends, and a loop about to fall asleep waits for
  -- it, then looks at the queue once more (bitrix_sync.watch_intake()).
  if not pg_try_advisory_xact_lock_shared(727014, 1) then
    perform pg_notify('bitrix_sync_queue', v_task);
  end if;
  return null;
end $$;
comment on function han_app.enqueue_contact_sync() is
  'AFTER INSERT/UPDATE trigger on user_identity and client_profile (§6.2): active insert or return to active -> contact.map_or_create; leaving active -> contact.deactivate; phone change of an active identity (TG_ARGV[0] = ''phone'', decided by the trigger''s WHEN) -> contact.update. Skips when han.sync_suppress = ''true''. Coalesces per (task, user) into the active intent. NOTIFYs bitrix_sync_queue only while a sync loop sleeps on the intake watch (bitrix_sync.watch_intake()).';

-- The triggers: the WHEN clauses keep every write that records nothing out of PL/pgSQL.
drop trigger if exists _500_enqueue_contact_sync on han_app.user_identity;
drop trigger if exists _500_enqueue_contact_sync_insert on han_app.user_identity;
create trigger _500_enqueue_contact_sync_insert
  after insert on han_app.user_identity
  for each row
  when (new.record_status = 'active')
  execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync_insert on han_app.user_identity is
  'Records contact.map_or_create for an active identity (§6.2).';

drop trigger if exists _500_enqueue_contact_sync_update on han_app.user_identity;
create trigger _500_enqueue_contact_sync_update
  after update of phone_number, record_status on han_app.user_identity
  for each row
  when (old.phone_number is distinct from new.phone_number or old.record_status is distinct from new.record_status)
  execute function han_app.enqueue_contact_sync('phone');
comment on trigger _500_enqueue_contact_sync_update on han_app.user_identity is
  'Records contact.update (phone change of an active identity), contact.deactivate (leaving active) or contact.map_or_create (back to active) (§6.2).';

drop trigger if exists _500_enqueue_contact_sync on han_app.client_profile;
drop trigger if exists _500_enqueue_contact_sync_insert on han_app.client_profile;
create trigger _500_enqueue_contact_sync_insert
  after insert on han_app.client_profile
  for each row
  when (new.record_status = 'active')
  execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync_insert on han_app.client_profile is
  'Records contact.map_or_create for an active profile (§6.2).';

drop trigger if exists _500_enqueue_contact_sync_update on han_app.client_profile;
create trigger _500_enqueue_contact_sync_update
  after update of record_status on han_app.client_profile
  for each row
  when (old.record_status is distinct from new.record_status)
  execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync_update on han_app.client_profile is
  'Records contact.deactivate / contact.map_or_create when the profile leaves or returns to active (§6.2).';

-- The intake watch (advisory lock 727014/1) and who takes it (727014/2): see watch_intake().
create or replace function bitrix_sync.watch_intake() returns boolean
language plpgsql set lock_timeout = '1s' as $$
begin
  -- One sleeper per database is enough: NOTIFY wakes every listener.
  if not pg_try_advisory_lock(727014, 2) then
    return false;
  end if;
  begin
    -- Exclusive: waits for the App transactions that recorded an intent without a NOTIFY (they hold
    -- the watch shared) to end, so the caller's next look at the queue sees their intents. From
    -- here until unwatch_intake(), every intent NOTIFYs.
    perform pg_advisory_lock(727014, 1);
  exception when lock_not_available then
    -- A long App transaction: give up watching this time; the fallback poll covers it.
    perform pg_advisory_unlock(727014, 2);
    return false;
  end;
  return true;
end $$;
comment on function bitrix_sync.watch_intake() is
  'Called by a sync loop (on its LISTEN connection) whose intake found nothing, before it sleeps: takes the intake watch (session advisory lock 727014/1, exclusive) after the App transactions that recorded intents without a NOTIFY have ended; from then on han_app.enqueue_contact_sync() NOTIFYs. The caller must look at the queue once more before sleeping, and call unwatch_intake() when it wakes. Returns false (nothing held) when another loop watches or an App transaction holds the watch for over 1 s; the fallback poll covers that.';

create or replace function bitrix_sync.unwatch_intake() returns void
language sql as $$
  select pg_advisory_unlock(727014, 1) and pg_advisory_unlock(727014, 2);
  select null::void;
$$;
comment on function bitrix_sync.unwatch_intake() is
  'A sync loop''s intake is awake again: releases the intake watch taken by watch_intake(), and the App''s intents stop NOTIFYing.';
