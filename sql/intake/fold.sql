-- The intake's fold (§6.2): the App's journal of intents into han_app.sync_queue, one fold at a
-- time, before every claim and the cutover. The lock is on a table only the owner may lock
-- (sql/intake/watch.sql says why no advisory lock).

-- The journal's fold (SHARE UPDATE EXCLUSIVE on bitrix_sync.lock_intake_fold: one folder at a time,
-- so a later fold always carries later intents than an earlier one, and two folders never lock the
-- same queue rows in turn).
create or replace function bitrix_sync.fold_intent_journal(p_limit integer default 10000, p_wait boolean default false)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_taken integer;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
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
    -- One intent per (task, user): the newest says why and where it stands in the queue; the oldest
    -- says since when.
    select distinct on (t.task_type, t.user_id)
           t.task_type, t.user_id, t.reason, t.source_updated_at,
           min(t.recorded_at) over (partition by t.task_type, t.user_id) as first_recorded_at,
           max(t.recorded_at) over (partition by t.task_type, t.user_id) as last_recorded_at
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
           'pending', l.last_recorded_at, l.first_recorded_at, now()
      from latest l
     order by l.user_id, l.task_type
    -- A newer intent coalesces into the user's active one of the same task. If a worker holds it,
    -- the row goes back to pending, which fences the holder: its completion is refused and the row
    -- is processed again with the newest state. A retry_wait row becomes due now. A pending row is
    -- due already and no worker holds it: it keeps the reason of the intent that made it pending
    -- (workers read the App's rows, not the payload; a drift repair stays one).
    -- Every row's place in the queue (next_attempt_at, which claims order by and hand the intake
    -- in) is its newest intent's: a user's intents of different tasks are taken in the order the App
    -- recorded them last. A user deactivated and reactivated while nothing was claimed (a pause, a
    -- backlog) ends with the reactivation, not with the deactivation its older row stood behind
    -- (found by drill:rollback).
    on conflict (dedup_key) where status in ('pending', 'leased', 'retry_wait')
    do update set payload_json = case when q.status = 'pending' then q.payload_json else excluded.payload_json end,
                  status = 'pending',
                  next_attempt_at = greatest(least(q.next_attempt_at, now()), excluded.next_attempt_at),
                  locked_by = null,
                  locked_until = null,
                  lease_token = null,
                  updated_at = now()
             where q.status <> 'pending' or q.next_attempt_at < excluded.next_attempt_at
    returning 1
  )
  select count(*) into v_taken from taken;
  return v_taken;
end $$;
comment on function bitrix_sync.fold_intent_journal(integer, boolean) is
  'Moves up to p_limit intents from han_app.sync_queue_journal into han_app.sync_queue in one statement: one row per (task, user) with the newest reason, created at the oldest intent''s time and placed in the queue (next_attempt_at) at the newest one''s, coalesced into the active intent of the same task (a leased one goes back to pending: its holder is fenced; a retry_wait one becomes due; a pending one keeps its reason and moves to the newest intent''s place). One folder at a time (SHARE UPDATE EXCLUSIVE on bitrix_sync.lock_intake_fold, which no other role can take): without p_wait it returns 0 at once while another transaction folds. Returns the number of journal rows taken. claim_sync_tasks() and perform_cutover() call it first; an admin may call it to see recorded intents in the queue now.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.fold_intent_journal(integer,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Called first by claim_sync_tasks and perform_cutover; an admin may fold to see recorded intents in the queue now.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
