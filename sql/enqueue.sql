-- Enqueue trigger (§6.2): App changes that matter to the CRM become han_app.sync_queue intents in
-- the App's own transaction, so a rolled-back business update leaves no intent behind.
--
-- Lean on the App's writes (issue 14; docs/performance.md, "Intent writes"):
-- - The triggers' WHEN clauses keep every write that changes no tracked field (no-op updates
--   included) out of PL/pgSQL. They are short on purpose: PostgreSQL parses a trigger's WHEN (and a
--   table's CHECK constraints) again for every statement, so a long one costs every App update.
-- - The function only names the intent and appends it to han_app.sync_queue_journal, a table with
--   no index, constraint or trigger: no whole-row JSON, no ON CONFLICT, no state guard on the App's
--   path. The service folds the journal into han_app.sync_queue (fold_intent_journal(), below)
--   before every claim: coalescing per (task, user) and fencing a leased row happen there.
-- - The wake-up NOTIFY is sent only while a sync loop is asleep waiting for intents (it holds the
--   intake watch, bitrix_sync.watch_intake()). PostgreSQL serialises the commits of notifying
--   transactions, so a NOTIFY per App transaction would queue the App's commits one behind the other
--   while the loop is busy anyway; see watch_intake() for why no intent is missed.
--
-- Locks no other role can take (migration 000028; docs/security.md). The watch and the fold are
-- table locks on two tables without rows or columns, bitrix_sync.lock_intake_watch and
-- bitrix_sync.lock_intake_fold, taken only by the security definer functions below: LOCK TABLE needs
-- rights on the table, which only the owner has, and the schema is out of reach of the App and of
-- any other role. They were advisory locks (727014/1..3), which every role that can connect may
-- take. What another role can still get on any table, by its oid and without rights, is ACCESS
-- SHARE (pg_relation_size) and ROW EXCLUSIVE, kept to the end of its transaction (a failing
-- nextval() on the table), and it can wait for SHARE UPDATE EXCLUSIVE (brin_summarize_range() on a
-- table fails only once it has the lock). So the fold and a loop's claim to the watch use SHARE
-- UPDATE EXCLUSIVE (compatible with both, conflicting with itself), the App's mark is ROW EXCLUSIVE
-- (compatible with both), and the watch SHARE, which a role holding ROW EXCLUSIVE on the watch table
-- does block: the loop then gives up watching and polls (worker.poll_interval_ms) and no App commit
-- NOTIFYs, since the loop tries without queueing (NOWAIT) and so never makes the App's NOWAIT fail.
-- Nothing here writes a row, takes a transaction ID or holds a snapshot.

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

-- The triggers: the WHEN clauses keep every write that records nothing out of PL/pgSQL.
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

-- The journal's fold (SHARE UPDATE EXCLUSIVE on bitrix_sync.lock_intake_fold: one folder at a time,
-- so a later fold always carries later intents than an earlier one, and two folders never lock the
-- same queue rows in turn).
create or replace function bitrix_sync.fold_intent_journal(p_limit integer default 10000, p_wait boolean default false)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_taken integer;
begin
  if p_limit is null or p_limit < 1 or p_limit > 100000 then
    raise exception 'a fold takes 1..100000 journal rows, not %', coalesce(p_limit::text, 'null')
      using errcode = 'BS004', hint = 'Call fold_intent_journal() without arguments, or with a limit in that range.';
  end if;
  if p_wait then
    lock table bitrix_sync.lock_intake_fold in share update exclusive mode;
  else
    begin
      lock table bitrix_sync.lock_intake_fold in share update exclusive mode nowait;
    exception when lock_not_available then
      -- Another transaction is folding right now; its rows become visible when it commits.
      return 0;
    end;
  end if;

  with taken as (
    -- The journal has no index: the rows are taken as the heap holds them, by their addresses.
    delete from han_app.sync_queue_journal j
     where j.ctid = any (array(select s.ctid from han_app.sync_queue_journal s limit p_limit))
    returning j.task_type, j.user_id, j.reason, j.source_updated_at, j.recorded_at
  ), latest as (
    -- One intent per (task, user): the newest says why; the oldest says since when.
    select distinct on (t.task_type, t.user_id)
           t.task_type, t.user_id, t.reason, t.source_updated_at,
           min(t.recorded_at) over (partition by t.task_type, t.user_id) as first_recorded_at
      from taken t
     order by t.task_type, t.user_id, t.recorded_at desc
  ), folded as (
    -- In user order, the order the step groups and intake batches lock in.
    insert into han_app.sync_queue as q (task_type, entity_type, entity_id, dedup_key, payload_json, status,
                                         next_attempt_at, created_at, updated_at)
    select l.task_type, 'user', l.user_id, l.task_type || ':user:' || l.user_id::text,
           jsonb_build_object(
             'schema_version', 1,
             'user_id', l.user_id,
             'reason', l.reason,
             'source_updated_at', to_char(l.source_updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
           'pending', l.first_recorded_at, l.first_recorded_at, now()
      from latest l
     order by l.user_id, l.task_type
    -- A newer intent coalesces into the user's active one of the same task. If a worker holds it,
    -- the row goes back to pending, which fences the holder: its completion is refused and the row
    -- is processed again with the newest state. A retry_wait row becomes due now. A pending row is
    -- due already and no worker holds it, so it is left as it is (no new row version): it keeps the
    -- reason of the intent that made it pending (workers read the App's rows, not the payload).
    on conflict (dedup_key) where status in ('pending', 'leased', 'retry_wait')
    do update set payload_json = excluded.payload_json,
                  status = 'pending',
                  next_attempt_at = least(q.next_attempt_at, now()),
                  locked_by = null,
                  locked_until = null,
                  lease_token = null,
                  updated_at = now()
             where q.status <> 'pending'
    returning 1
  )
  select count(*) into v_taken from taken;
  return v_taken;
end $$;
comment on function bitrix_sync.fold_intent_journal(integer, boolean) is
  'Moves up to p_limit intents from han_app.sync_queue_journal into han_app.sync_queue in one statement: one row per (task, user) with the newest reason, created at the oldest intent''s time, coalesced into the active intent of the same task (a leased one goes back to pending: its holder is fenced; a retry_wait one becomes due; a pending one is left as it is). One folder at a time (SHARE UPDATE EXCLUSIVE on bitrix_sync.lock_intake_fold, which no other role can take): without p_wait it returns 0 at once while another transaction folds. Returns the number of journal rows taken. claim_sync_tasks() and perform_cutover() call it first; an admin may call it to see recorded intents in the queue now.';

-- The intake watch: SHARE on bitrix_sync.lock_intake_watch, held by a sleeping loop's transaction.
create or replace function bitrix_sync.watch_intake() returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  begin
    -- One sleeper per database is enough: NOTIFY wakes every listener. SHARE UPDATE EXCLUSIVE
    -- conflicts with another loop's and not with the App's ROW EXCLUSIVE.
    lock table bitrix_sync.lock_intake_watch in share update exclusive mode nowait;
    -- SHARE waits for the App transactions that recorded an intent without a NOTIFY (they hold ROW
    -- EXCLUSIVE) to end, so the caller's next look at the queue sees their intents. From here until
    -- the caller's transaction ends, every intent NOTIFYs. Tried without queueing, every 5 ms for
    -- up to 1 s: a request waiting in the lock's queue would make the App's NOWAIT fail, so a role
    -- holding ROW EXCLUSIVE on the table could make App commits NOTIFY for as long as it waits.
    for i in 1 .. 200 loop
      begin
        lock table bitrix_sync.lock_intake_watch in share mode nowait;
        return true;
      exception when lock_not_available then
        perform pg_sleep(0.005);
      end;
    end loop;
    -- A long App transaction: give up watching this time; the fallback poll covers it. Raised to
    -- the block around, which gives the sleeper's lock back too.
    raise exception using errcode = 'lock_not_available';
  exception when lock_not_available then
    return false;
  end;
end $$;
comment on function bitrix_sync.watch_intake() is
  'Called by a sync loop whose intake found nothing, before it sleeps, inside a transaction of its own on a connection of its own (a LISTEN connection gets no notification inside a transaction): takes the intake watch (SHARE on bitrix_sync.lock_intake_watch) once the App transactions that recorded intents without a NOTIFY have ended; from then on han_app.enqueue_contact_sync() NOTIFYs, until the caller ends its transaction when it wakes. The caller must look at the queue once more before sleeping. Returns false (nothing held) when another loop watches or the watch stays taken for over 1 s (a long App transaction); the fallback poll covers that. Takes no transaction ID and keeps no snapshot.';
