--! Previous: sha1:0c1e1170865f88034023e8884dd44a644d92502a
--! Hash: sha1:5cd659cea76cf8edad33a096db2dc0ac574b1e46
--! Message: intent-journal

-- The App's intents go into a journal (issue 14, bench:trigger; docs/performance.md, "Intent writes,
-- second round"): han_app.enqueue_contact_sync() appends one row to han_app.sync_queue_journal, a
-- table with no index, constraint or trigger, instead of an INSERT ... ON CONFLICT into
-- han_app.sync_queue with its five indexes, four CHECKs and state guard. The intent is still written
-- in the App's own transaction. bitrix_sync.fold_intent_journal() coalesces the journal into
-- sync_queue (one row per task and user, a leased row fenced by a newer intent) at the start of
-- every claim_sync_tasks() and perform_cutover(); status_queue counts unfolded intents as pending.
-- A deviation from §6.2 (the trigger writes sync_queue), documented in docs/workflows.md.
set local lock_timeout = '10s';

-- Append-only hand-off, read whole by one folder at a time: no primary key and no index on purpose
-- (each would cost every App write an index entry), and its rows live until the next claim.
create table if not exists han_app.sync_queue_journal (
  task_type text not null,
  user_id uuid not null,
  reason text not null,
  source_updated_at timestamptz,
  recorded_at timestamptz not null default clock_timestamp()
) with (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0,
        autovacuum_vacuum_insert_threshold = 100000);
comment on table han_app.sync_queue_journal is
  'Intents recorded by han_app.enqueue_contact_sync() in the App''s transaction and not yet folded into han_app.sync_queue by bitrix_sync.fold_intent_journal() (before every claim). No key or index on purpose: it is appended by the App''s writes and taken whole.';
comment on column han_app.sync_queue_journal.task_type is 'contact.map_or_create, contact.update or contact.deactivate, as the trigger decided.';
comment on column han_app.sync_queue_journal.user_id is 'user_identity.id of the user the intent is about.';
comment on column han_app.sync_queue_journal.reason is 'Why the trigger recorded it (identity_phone_changed, profile_created, ...): the queue payload''s reason.';
comment on column han_app.sync_queue_journal.source_updated_at is 'updated_at of the App row that fired the trigger.';
comment on column han_app.sync_queue_journal.recorded_at is 'When the trigger ran (clock time, after the App row''s lock): the queue row''s created_at and first due time.';

-- >>> sql/enqueue.sql (included)
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

  -- The intent goes into the journal: one row appended to a table without indexes, constraints to
  -- re-parse or triggers. bitrix_sync.fold_intent_journal() coalesces it into han_app.sync_queue
  -- (one active row per task and user; a newer intent takes a leased row back to pending, which
  -- fences its holder) before every claim, so a worker never looks at the queue without it.
  insert into han_app.sync_queue_journal (task_type, user_id, reason, source_updated_at)
  values (v_task, v_user_id, v_reason, new.updated_at);

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
  'AFTER INSERT/UPDATE trigger on user_identity and client_profile (§6.2): active insert or return to active -> contact.map_or_create; leaving active -> contact.deactivate; phone change of an active identity (TG_ARGV[0] = ''phone'', decided by the trigger''s WHEN) -> contact.update. Skips when han.sync_suppress = ''true''. Appends the intent to han_app.sync_queue_journal; fold_intent_journal() coalesces it per (task, user) into sync_queue before every claim. NOTIFYs bitrix_sync_queue only while a sync loop sleeps on the intake watch (bitrix_sync.watch_intake()).';

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

-- The journal's fold (advisory lock 727014/3: one folder at a time, so a later fold always carries
-- later intents than an earlier one, and two folders never lock the same queue rows in turn).
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
    perform pg_advisory_xact_lock(727014, 3);
  elsif not pg_try_advisory_xact_lock(727014, 3) then
    -- Another transaction is folding right now; its rows become visible when it commits.
    return 0;
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
  'Moves up to p_limit intents from han_app.sync_queue_journal into han_app.sync_queue in one statement: one row per (task, user) with the newest reason, created at the oldest intent''s time, coalesced into the active intent of the same task (a leased one goes back to pending: its holder is fenced). One folder at a time (advisory lock 727014/3): without p_wait it returns 0 at once while another transaction folds. Returns the number of journal rows taken. claim_sync_tasks() and perform_cutover() call it first; an admin may call it to see recorded intents in the queue now.';

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
-- <<< sql/enqueue.sql
-- >>> sql/queue.sql (included)
-- Leases on han_app.sync_queue (§6.1): short claim transactions with FOR UPDATE SKIP LOCKED, a new
-- lease token on every claim, and completion only under the current token (fencing).

create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable as $$
begin
  if p_code is null or p_code !~ '^[a-z0-9][a-z0-9_.]{0,63}$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
comment on function bitrix_sync._check_code(text) is
  'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';

create or replace function bitrix_sync._refuse_stale(p_what text, p_id text) returns void
language plpgsql as $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;
comment on function bitrix_sync._refuse_stale(text, text) is
  'Raises BS001 for a completion that does not present the current lease token (a stale holder).';

create or replace function bitrix_sync.claim_sync_tasks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof han_app.sync_queue
language plpgsql as $$
declare
  v_watermark timestamptz;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- Nothing is processed before the cutover, and after it only intents recorded since the
  -- watermark (§17 step 8), also when an expired lease is reclaimed.
  select c.cutover_watermark into v_watermark from bitrix_sync.cutover c;
  if v_watermark is null then
    return;
  end if;
  -- The App's recorded intents first (han_app.sync_queue_journal). A fold running elsewhere is
  -- waited for (it is short), so every intent committed before this call is in the queue when the
  -- claim below looks: the intake watch's "one more look" (watch_intake()) relies on that.
  perform bitrix_sync.fold_intent_journal(10000, true);
  return query
  with due as (
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
     where q.status in ('pending', 'retry_wait') and q.next_attempt_at <= now()
       and q.created_at >= v_watermark
     order by q.next_attempt_at, q.created_at
     limit p_limit
     for update skip locked
  ), expired as (
    select q.id, q.locked_until as sort_at from han_app.sync_queue q
     where q.status = 'leased' and q.locked_until < now() and q.created_at >= v_watermark
     order by q.locked_until
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) c order by sort_at limit p_limit
  )
  update han_app.sync_queue q
     set status = 'leased',
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         lease_token = gen_random_uuid(),
         attempt_count = q.attempt_count + 1,
         updated_at = now()
    from picked
   where q.id = picked.id
  returning q.*;
end $$;
comment on function bitrix_sync.claim_sync_tasks(text, integer, interval) is
  'Folds the App''s journal first (fold_intent_journal()), then claims up to p_limit due intents recorded since the cutover watermark (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED; each gets a new lease_token. Two claimers never get the same row. Returns nothing before perform_cutover().';

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
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

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
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

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
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

create or replace function bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_row.id
  returning * into v_row;
  -- The intent's first attempt is its arrival: it is claimed as soon as it is due.
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, operation, error_code, attempt_count, first_attempt_at, deadline_at)
  values ('sync_queue', v_row.id::text, v_row.task_type, p_error_code, v_row.attempt_count, v_row.created_at,
          bitrix_sync._retry_deadline(v_row.created_at));
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue, text) is
  'Internal: moves a held intent to dead_letter and writes its technical DLQ row (first attempt = created_at).';

create or replace function bitrix_sync.retry_sync_task(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns han_app.sync_queue
language plpgsql as $$
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

create or replace function bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
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

create or replace function bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
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
-- <<< sql/queue.sql
-- >>> sql/cutover.sql (included)
-- Cutover from the stub to full sync (§17): one watermark; intents recorded before it that were
-- still waiting are cancelled with reason initial_full_sync_cutover. Running it again changes nothing.
-- Until it has run, every claim function returns nothing (the gate below): no replica, CLI worker
-- or psql session can process stub-era intents, whatever its configuration says. Receivers still
-- record webhooks; they wait in the inbox.

create or replace function bitrix_sync.cutover_performed() returns boolean
language sql stable parallel safe as $$
  select exists (select 1 from bitrix_sync.cutover)
$$;
comment on function bitrix_sync.cutover_performed() is
  'The processing gate (§17): true once perform_cutover() has run. The claim functions return nothing while it is false; readiness reports cutover_not_performed.';

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
-- <<< sql/cutover.sql
-- >>> sql/status.sql (included)
-- Status views (§14): counts and ages only, never PII, Contact/user IDs or raw errors. Readable by
-- bitrix_sync_admin and used by GET /internal/sync/v1/status and /metrics.
--
-- Each view reads live rows only, through a partial index whose predicate is the view's WHERE
-- (written the same way, so the planner can prove it), never the finished history that retention
-- deletes later: a scrape costs the same with a year of history as with a day
-- (test/integration/status-plans.test.ts).

-- Intents the App recorded that no claim has folded yet (han_app.sync_queue_journal) are pending too:
-- a service that stopped folding shows a growing, ageing pending depth.
create or replace view bitrix_sync.status_queue as
select g.status, sum(g.count)::bigint as count,
       extract(epoch from now() - min(g.oldest_at))::bigint as oldest_age_sec
  from (select q.status, count(*) as count, min(q.created_at) as oldest_at
          from han_app.sync_queue q
         where q.status in ('pending', 'leased', 'retry_wait', 'dead_letter')
         group by q.status
        union all
        select 'pending'::varchar(16), count(*), min(j.recorded_at)
          from han_app.sync_queue_journal j
        having count(*) > 0) g
 group by g.status;
comment on view bitrix_sync.status_queue is
  'han_app.sync_queue depth and oldest age by live status (pending, leased, retry_wait) and dead_letter, with the intents still in han_app.sync_queue_journal counted as pending; processed and cancelled rows are history, not depth.';

create or replace view bitrix_sync.status_workflows as
select w.workflow_type, w.state, count(*)::bigint as count,
       extract(epoch from now() - min(w.created_at))::bigint as oldest_age_sec
  from bitrix_sync.workflow_instances w
 where w.state not in ('succeeded', 'failed', 'cancelled')
 group by w.workflow_type, w.state;
comment on view bitrix_sync.status_workflows is 'Active workflows by type and state, with the oldest age.';

create or replace view bitrix_sync.status_commands as
select c.command_type, c.status, count(*)::bigint as count,
       extract(epoch from now() - min(c.created_at))::bigint as oldest_age_sec
  from bitrix_sync.crm_commands c
 where c.status <> 'succeeded'
 group by c.command_type, c.status;
comment on view bitrix_sync.status_commands is 'Unfinished and dead-lettered CRM commands by type and status.';

create or replace view bitrix_sync.status_webhooks as
select w.receiver, w.status, count(*)::bigint as count,
       extract(epoch from now() - min(w.received_at))::bigint as oldest_age_sec
  from bitrix_sync.webhook_inbox w
 where w.status <> 'processed'
 group by w.receiver, w.status;
comment on view bitrix_sync.status_webhooks is 'Unprocessed webhook inbox rows by receiver and status (webhook lag).';

create or replace view bitrix_sync.status_dead_letters as
select d.source, d.operation, d.error_code, count(*)::bigint as count,
       extract(epoch from now() - min(d.created_at))::bigint as oldest_age_sec
  from bitrix_sync.technical_dead_letters d
 where d.resolved_at is null
 group by d.source, d.operation, d.error_code;
comment on view bitrix_sync.status_dead_letters is 'Open technical dead letters by source, operation and safe code.';

create or replace view bitrix_sync.status_alerts as
select a.alert_type, a.severity, count(*)::bigint as open_count,
       count(*) filter (where a.first_occurred_at < now() - make_interval(hours =>
         (select (bitrix_sync._active_setting('alerts.sla_hours') #>> '{}')::integer)))::bigint as sla_overdue
  from bitrix_sync.business_alerts a
 where a.status = 'open'
 group by a.alert_type, a.severity;
comment on view bitrix_sync.status_alerts is 'Open business alerts by type and severity, with how many are past the SLA.';

create or replace view bitrix_sync.status_alert_mirror as
select a.crm_sync_status as mirror_status, count(*)::bigint as count,
       extract(epoch from now() - min(a.updated_at))::bigint as oldest_age_sec
  from bitrix_sync.business_alerts a
 where a.crm_sync_status <> 'synced'
 group by a.crm_sync_status;
comment on view bitrix_sync.status_alert_mirror is
  'Business alerts whose smart-process item is behind: pending (a change not yet sent, e.g. alerts.entity_type_id unset or an unanswered add being looked up) and failed (could not be mirrored; see technical_dead_letters).';
-- Privileges: sql/privileges.sql (the runtime reads it for /metrics and the status endpoint, an
-- admin from psql).
-- <<< sql/status.sql
-- >>> sql/privileges.sql (included)
-- The privilege catalogue (§13, DESIGN.md "Roles"; issue 10): for every schema, table, view,
-- sequence and function of the project, what each of the three roles may do, written out, "nothing"
-- included. sql/grants.sql revokes everything and grants exactly this list; docs/security.md is
-- rendered from it; test/integration/privileges.test.ts checks that the database's ACLs equal it and
-- that no object of bitrix_sync (or the project's objects of han_app) lacks a decision.
--
-- Adding a function, table, view or sequence: add one row here (runtime, admin, app; '{}' is an
-- explicit "nothing") and include sql/privileges.sql and sql/grants.sql in the migration.
--
-- A privilege is written as GRANT takes it: 'SELECT', 'EXECUTE', 'USAGE', or with columns,
-- 'UPDATE (status, locked_by)'. Objects are schema-qualified; a function by its signature as
-- regprocedure prints it (types, no parameter names).
--
-- Who is who: bitrix_sync_user runs the service (the functions it calls and their internal
-- helpers; it writes its tables only in the columns those functions write, so an insert can never
-- name a state and identity or audit columns are out of reach; sql/row_guards.sql holds the same
-- rules for every writer). bitrix_sync_admin is an operator with psql: the audited admin functions
-- (security definer, so no table rights), the status views and the settings it changes.
-- han_app_user is the App: its identity and profile tables; sync_queue rows appear through the
-- security definer trigger.

create or replace view bitrix_sync.role_privileges as
with decisions (object_type, object_name, runtime, admin, app, note) as (values
  -- schemas
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], 'The project''s schema; the App has no business in it.'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], 'The App''s schema; the admin reaches the queue only through status_queue.'),

  -- App tables (§13: the runtime reads the columns it needs and writes only the CRM-master fields)
  ('table', 'han_app.user_identity', array['SELECT (id, phone_number, record_status, created_at, updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'Identity is App-master; the runtime reads it at send time.'),
  ('table', 'han_app.client_profile',
   array['SELECT (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)',
         'UPDATE (full_name, citizenship, email, source_updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'The runtime writes only the CRM-master fields (§3.1), through apply_crm_master_fields.'),
  ('table', 'han_app.sync_queue',
   array['SELECT', 'UPDATE (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code, last_error_at, completed_at, cancel_reason, updated_at)'],
   array[]::text[], array['SELECT'],
   'Intents appear through the fold of the App''s journal (fold_intent_journal, security definer); the runtime moves them through the lease functions and never inserts one.'),
  ('table', 'han_app.sync_queue_journal', array['SELECT'], array[]::text[], array['SELECT'],
   'The trigger (security definer) appends and fold_intent_journal (security definer) takes; the runtime and the App may look, neither writes.'),
  ('function', 'han_app.enqueue_contact_sync()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): fires for the App''s writes; nobody calls it.'),

  -- bitrix_sync tables the runtime writes through its functions: only the columns they write
  ('table', 'bitrix_sync.business_alerts',
   array['SELECT',
         'INSERT (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, previous_alert_id, correlation_id)',
         'UPDATE (occurrence_count, last_occurred_at, current_contact_id, selected_contact_id, candidate_contact_ids, details, correlation_id, crm_sync_status, item_id, stage_id, status, closed_at)'],
   array[]::text[], array[]::text[], 'Alerts are raised open and finished by the runtime; the admin sees them through status_alerts.'),
  ('sequence', 'bitrix_sync.business_alert_number_seq', array['USAGE'], array[]::text[], array[]::text[],
   'The default of business_alerts.alert_number, evaluated as the inserting role.'),
  ('table', 'bitrix_sync.contact_snapshots',
   array['SELECT',
         'INSERT (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)',
         'UPDATE (user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)'],
   array[]::text[], array[]::text[], 'Hashes of what the runtime last wrote into or read from each Contact.'),
  ('table', 'bitrix_sync.crm_commands',
   array['SELECT',
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)', 'UPDATE (status, closed_at, close_reason, workflow_id)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions; the user and the Contact of a link never change.'),
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash, trace_context)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at, trace_context)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- metrics (sql/metrics.sql): written by security definer triggers, read by metrics_snapshot()
  ('table', 'bitrix_sync.metric_event_totals', array[]::text[], array[]::text[], array[]::text[],
   'Counter totals; only metrics_snapshot() (security definer) folds into and reads them.'),
  ('table', 'bitrix_sync.metric_events', array[]::text[], array[]::text[], array[]::text[],
   'Counted events; appended by the security definer _900 triggers whoever makes the change.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, dead_letter_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
   'Audit of the admin functions (security definer) that write it; the Contact a decision named stays out of the admin''s reading.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),

  -- identity sequences: inserting into an identity column needs no right on its sequence
  ('sequence', 'bitrix_sync.admin_actions_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of admin_actions.'),
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),

  -- views
  ('view', 'bitrix_sync.parked_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Workflows waiting for a person, with their reason and the decisions that apply (docs/admin.md).'),
  ('view', 'bitrix_sync.rebind_request_status', array[]::text[], array['SELECT'], array[]::text[],
   'Rebind requests as an admin follows them (docs/admin.md).'),
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.'),
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).'),
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.'),
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.'),
  ('view', 'bitrix_sync.status_alert_mirror', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14): alerts whose smart-process item is behind (pending, failed); read by /metrics.'),
  ('view', 'bitrix_sync.status_commands', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_dead_letters', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_queue', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_webhooks', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_workflows', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),

  -- admin functions (security definer): cutover, settings, rebind, re-recording a lost webhook
  ('function', 'bitrix_sync.accept_webhook(text,integer,text,inet)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Re-records one robot call by hand (the robot does not retry).'),
  ('function', 'bitrix_sync.activate_settings_version(integer,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.perform_cutover(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The one-time cutover (§17); it also opens the processing gate.'),
  ('function', 'bitrix_sync.propose_settings(jsonb,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind (§5.4).'),
  ('function', 'bitrix_sync.cancel_rebind_request(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind: cancel an open request (docs/admin.md).'),
  ('function', 'bitrix_sync.resume_parked_workflow(uuid,text,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: resume with a decision.'),
  ('function', 'bitrix_sync.cancel_parked_workflow(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: cancel with a reason.'),
  ('function', 'bitrix_sync._parked_decisions(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The decisions a parked reason admits; called by the parked_workflows view with the reader''s rights.'),
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.list_dead_letters(boolean,integer)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: what is open, and what a requeue would do (docs/admin.md).'),
  ('function', 'bitrix_sync.acknowledge_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: resolved without a new attempt, audited.'),
  ('function', 'bitrix_sync.requeue_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: a new attempt through the normal state machine, audited.'),
  ('function', 'bitrix_sync.retention_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Retention: what the next run would delete (reads the history: by hand only).'),
  ('function', 'bitrix_sync.delete_retention_batch(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one batch of finished rows (security definer: nobody holds DELETE on those tables); the hourly task, or an admin now.'),

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),

  ('function', 'bitrix_sync.metrics_snapshot(text,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'GET /metrics (security definer): counts, ages and counters with low-cardinality labels; the admin may run it in psql.'),

  -- runtime functions: the receivers
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement (and the readiness probe of that path).'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
  ('function', 'bitrix_sync.fold_intent_journal(integer,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Called first by claim_sync_tasks and perform_cutover; an admin may fold to see recorded intents in the queue now.'),
  ('function', 'bitrix_sync.watch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop takes the intake watch before it sleeps (the App''s intents then NOTIFY).'),
  ('function', 'bitrix_sync.unwatch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop releases the intake watch when it wakes.'),
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).'),
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.step_context(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (the start of a step).'),
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  ('function', 'bitrix_sync.take_sync_tasks(uuid[],uuid[],uuid[],text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake of a claimed batch in one call.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.complete_commands(bigint[],uuid[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump settles a batch with it).'),
  ('function', 'bitrix_sync.bring_forward_commands(text[],integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump after a portal-wide failure).'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.mark_command_uncertain(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.reject_command(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.release_command(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.resolve_command_reconcile(bigint,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.retry_command(bigint,uuid,text,interval,boolean,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.send_commands(bigint[],uuid[],uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  -- runtime functions: the limiter
  ('function', 'bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.blocked_crm_methods(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_operating(text,text[],double precision[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_method_blocked(text,text,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_answered(text,double precision,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  -- runtime functions: inbox processing, mapping, snapshots, alerts, rebind workflow, reconciliation
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.recover_alert_command(bigint,interval)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Alert mirroring: an unanswered alert command moves on (sql/alert_mirror.sql).'),
  ('function', 'bitrix_sync.alerts_to_look_up(integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: items to look up.'),
  ('function', 'bitrix_sync.issue_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup of an item.'),
  ('function', 'bitrix_sync.resolve_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup''s outcome.'),
  ('function', 'bitrix_sync.fail_alert_lookup(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: a lookup that failed for good.'),
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.apply_crm_master_fields(uuid,text,text,text,text,text,text,text,timestamp with time zone,boolean,timestamp with time zone,timestamp with time zone,text,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots and the CRM-master profile write.'),
  ('function', 'bitrix_sync.mark_contact_snapshot_stale(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_created(text,uuid,text,text,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_phone(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.finish_business_alert(bigint,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirror_failed(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirrored(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.raise_business_alert(text,text,text,uuid,text,text,jsonb,jsonb,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.record_alert_item(bigint,bigint,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.complete_rebind(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync._close_rebind_request(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Security definer, called by the trigger that closes the request of a finished contact.rebind workflow (the runtime''s transitions fire it).'),
  ('function', 'bitrix_sync.start_rebind_request(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync.claim_reconciliation_cursor(text,interval,boolean,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation (gated by the cutover).'),
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.finish_reconciliation_run(text,uuid,integer,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),

  -- internal helpers the runtime's (security invoker) functions call: a nested call is checked
  -- against the calling role too
  ('function', 'bitrix_sync._check_bitrix_error(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._check_code(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: refuses raw text as an error code.'),
  ('function', 'bitrix_sync._check_limiter_name(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter.'),
  ('function', 'bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the queue functions.'),
  ('function', 'bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the inbox functions.'),
  ('function', 'bitrix_sync._held_workflow(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the workflow functions.'),
  ('function', 'bitrix_sync._is_write_command(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of claim_commands.'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue, start_or_join, accept_webhooks).'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue_command, start_or_join_workflow, accept_webhooks).'),
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.'),
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.'),
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.'),
  ('function', 'bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of schedule_workflow_retry: the horizon counts from a requeue.'),
  ('function', 'bitrix_sync._alert_add_unsafe(bigint)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the alert mirror (runAlertSync asks it before an add).'),

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._open_dead_letter(bigint)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._resolve_dead_letters(bigint[],text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._retention_cutoff(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.'),
  ('function', 'bitrix_sync._record_admin_action(text,uuid,uuid,text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._rebind_crm_outcome(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of _close_rebind_request and cancel_rebind_request.'),
  ('function', 'bitrix_sync.tg_workflow_instances__close_rebind_request()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__start_held_intent()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync._normalise_settings(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._rebind_request_of(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the rebind workflow functions.'),
  ('function', 'bitrix_sync._resolve_conflict_alerts(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of complete_rebind.'),
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.'),
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_crm_commands__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_technical_dead_letters__count()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_webhook_inbox__count_coalesced()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_workflow_instances__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_settings_versions__freeze()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
)
select d.object_type, d.object_name, r.role, r.privileges, d.note
  from decisions d
  cross join lateral (values ('bitrix_sync_user', d.runtime), ('bitrix_sync_admin', d.admin), ('han_app_user', d.app))
    as r(role, privileges);
comment on view bitrix_sync.role_privileges is
  'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why. sql/grants.sql applies exactly this; docs/security.md is rendered from it.';

-- What the database actually grants, in the catalogue's terms, and where the two differ. The
-- project's objects are all of schema bitrix_sync and the objects of han_app the catalogue names
-- (in production han_app holds the App's other tables, which are none of this project's business).
create or replace view bitrix_sync.role_privilege_drift as
with objects as (
  select 'schema'::text as object_type, n.nspname::text as object_name, n.nspowner as owner, n.nspacl as acl,
         null::oid as relid, 'n'::"char" as acl_kind
    from pg_namespace n where n.nspname in ('bitrix_sync', 'han_app')
  union all
  select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'view' else 'table' end,
         format('%I.%I', n.nspname, c.relname), c.relowner, c.relacl, c.oid,
         case c.relkind when 'S' then 's'::"char" else 'r'::"char" end
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
  union all
  select 'function', p.oid::regprocedure::text, p.proowner, p.proacl, null, 'f'::"char"
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('bitrix_sync', 'han_app')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
), catalogue as (
  select rp.object_type, rp.object_name, rp.role, rp.privileges from bitrix_sync.role_privileges rp
), project_objects as (
  select o.* from objects o
   where o.object_name = 'bitrix_sync' or o.object_name like 'bitrix\_sync.%'
      or exists (select 1 from catalogue c where c.object_type = o.object_type and c.object_name = o.object_name)
), roles (role) as (
  values ('bitrix_sync_user'), ('bitrix_sync_admin'), ('han_app_user')
), actual as (
  -- object-wide privileges ...
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC') as role, a.privilege_type as privilege,
         null::text as column_name
    from project_objects o
    cross join lateral aclexplode(coalesce(o.acl, acldefault(o.acl_kind, o.owner))) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
  union all
  -- ... and column privileges
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname::text
    from project_objects o
    join pg_attribute att on att.attrelid = o.relid and att.attnum > 0 and not att.attisdropped and att.attacl is not null
    cross join lateral aclexplode(att.attacl) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
), expected as (
  select c.object_type, c.object_name, c.role, m[1] as privilege, btrim(col) as column_name
    from catalogue c
    cross join lateral unnest(c.privileges) spec
    cross join lateral regexp_match(spec, '^([A-Z]+)\s*(?:\((.*)\))?$') m
    cross join lateral unnest(coalesce(string_to_array(m[2], ','), array[null]::text[])) col
)
select e.object_type, e.object_name, e.role, e.privilege, e.column_name, 'missing'::text as problem
  from expected e
 where exists (select 1 from project_objects o where o.object_type = e.object_type and o.object_name = e.object_name)
   and not exists (select 1 from actual a where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                            and a.column_name is not distinct from e.column_name)
union all
select a.object_type, a.object_name, a.role, a.privilege, a.column_name, 'extra'
  from actual a
 where not exists (select 1 from expected e where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                              and a.column_name is not distinct from e.column_name)
   -- PUBLIC is checked only on what the project owns (it never grants PUBLIC anything); the App's
   -- identity and profile tables and its schema keep whatever the App gives everyone.
   and not (a.role = 'PUBLIC' and a.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
union all
select o.object_type, o.object_name, r.role, null, null, 'undecided'
  from project_objects o cross join roles r
 where not exists (select 1 from catalogue c where (c.object_type, c.object_name, c.role) = (o.object_type, o.object_name, r.role))
union all
select distinct c.object_type, c.object_name, null, null, null, 'unknown_object'
  from catalogue c
 where not exists (select 1 from objects o where o.object_type = c.object_type and o.object_name = c.object_name);
comment on view bitrix_sync.role_privilege_drift is
  'Differences between the database''s ACLs and bitrix_sync.role_privileges for the three roles and PUBLIC: missing and extra privileges (column privileges by column), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object). Empty when they agree.';
-- <<< sql/privileges.sql
-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md): everything is revoked, then exactly what the catalogue
-- bitrix_sync.role_privileges (sql/privileges.sql) lists is granted. Re-runnable; include it (after
-- sql/privileges.sql) in every migration that adds or changes an object of the project.
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

do $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A catalogue row naming no object, or an object of the project without a decision for a role,
  -- stops the migration: the next step would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Add a row per new object to sql/privileges.sql (runtime, admin, app; ''{}'' for nothing) and drop rows of removed objects, then include sql/privileges.sql and sql/grants.sql in the migration.';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and tables keep whatever the App grants its other roles and everyone.
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user', v_kind, v_row.object_name);
  end loop;
  revoke all on han_app.sync_queue from public;
  revoke all on han_app.sync_queue_journal from public;
  revoke all on function han_app.enqueue_contact_sync() from public;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;
end $$;
-- <<< sql/grants.sql
