-- Enqueue trigger (§6.2): App changes that matter to the CRM become intents in the App's own
-- transaction, so a rolled-back business update leaves no intent behind.
--
-- Lean on the App's writes (issue 14; docs/performance.md, "Intent writes"):
-- - The triggers' WHEN clauses keep every write that changes no tracked field (no-op updates
--   included) out of PL/pgSQL. They are short on purpose: PostgreSQL parses a trigger's WHEN (and a
--   table's CHECK constraints) again for every statement, so a long one costs every App update.
-- - The function only names the intent and appends it to han_app.sync_queue_journal, a table with
--   no index, constraint or trigger: no whole-row JSON, no ON CONFLICT, no state guard on the App's
--   path. The service folds the journal into han_app.sync_queue (sql/intake/fold.sql) before every
--   claim: coalescing per (task, user) and fencing a leased row happen there.
-- - The triggers themselves are in sql/intake/app_trigger_install.sql.
-- - The wake-up NOTIFY is sent only while a sync loop is asleep waiting for intents (it holds the
--   intake watch, sql/intake/watch.sql). PostgreSQL serialises the commits of notifying
--   transactions, so a NOTIFY per App transaction would queue the App's commits one behind the other
--   while the loop is busy anyway.

create or replace function han_app.enqueue_contact_sync() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_user_id uuid;
  v_task text;
  v_reason text;
  v_subject text := case tg_table_name when 'user_identity' then 'identity' else 'profile' end;
begin
  -- bitrix-sync writes CRM-master fields with han.sync_suppress = 'true' for its transaction: no
  -- echo. Any session can set the setting, so it is honoured only for the service's own sessions:
  -- the role the session acts as (SET ROLE, else its login) is bitrix_sync_user or a member of it
  -- (a superuser is a member of every role). An App session that sets it, for its transaction or
  -- left on a pooled connection, records its intents as ever. current_user would not do: this
  -- function is security definer.
  if current_setting('han.sync_suppress', true) = 'true'
     and pg_has_role(case current_setting('role') when 'none' then session_user
                                                  else current_setting('role')::name end,
                     'bitrix_sync_user', 'MEMBER') then
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

  -- The journal must still be the project's own: the owner of schema han_app could have put a table
  -- with triggers of its own in its place, which this function (security definer) would write with
  -- the schema owner's rights. Checked here rather than by _check_queue_tables(): this is the App's
  -- write path, and one catalogue read costs about 5 µs where a call of that function (its own
  -- search_path to set) costs several times more. current_user is this function's owner.
  perform 1 from pg_catalog.pg_class c
   where c.oid = pg_catalog.to_regclass('han_app.sync_queue_journal') and c.relkind = 'r'
     and pg_catalog.pg_has_role(c.relowner, 'USAGE');
  if not found then
    raise exception 'han_app.sync_queue_journal is no longer the project''s own table'
      using errcode = 'BS097',
            hint = 'Someone dropped it and made another in its place (the owner of schema han_app may): no intent is written to it. select * from bitrix_sync.app_table_hooks() names it (docs/security.md, "The App''s tables").';
  end if;
  -- The intent goes into the journal: one row appended to a table without indexes, constraints to
  -- re-parse or triggers. bitrix_sync.fold_intent_journal() coalesces it into han_app.sync_queue
  -- (one active row per task and user; a newer intent takes a leased row back to pending, which
  -- fences its holder) before every claim, so a worker never looks at the queue without it.
  insert into han_app.sync_queue_journal (task_type, user_id, reason, source_updated_at)
  values (v_task, v_user_id, v_reason, new.updated_at);

  -- Wake-up only; workers also poll (§8). The payload names no user. A sync loop asleep on the
  -- queue holds the intake watch (SHARE on bitrix_sync.lock_intake_watch), so this try fails exactly
  -- then. Otherwise this transaction now holds ROW EXCLUSIVE on it until it ends, and a loop about to
  -- fall asleep waits for it, then looks at the queue once more (bitrix_sync.watch_intake()). A
  -- second intent of the same transaction finds the lock held already.
  begin
    lock table bitrix_sync.lock_intake_watch in row exclusive mode nowait;
  exception when lock_not_available then
    perform pg_notify('bitrix_sync_queue', v_task);
  end;
  return null;
end $$;
comment on function han_app.enqueue_contact_sync() is
  'AFTER INSERT/UPDATE trigger on user_identity and client_profile (§6.2): active insert or return to active -> contact.map_or_create; leaving active -> contact.deactivate; phone change of an active identity (TG_ARGV[0] = ''phone'', decided by the trigger''s WHEN) -> contact.update. Skips when han.sync_suppress = ''true'' in a session acting as bitrix_sync_user or a member of it (SET ROLE, else the login role; superusers included); the App''s sessions cannot skip. Appends the intent to han_app.sync_queue_journal; fold_intent_journal() coalesces it per (task, user) into sync_queue before every claim. NOTIFYs bitrix_sync_queue only while a sync loop sleeps on the intake watch (bitrix_sync.watch_intake()).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'han_app.enqueue_contact_sync()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): fires for the App''s writes; nobody calls it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
