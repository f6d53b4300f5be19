-- Pause and resume (§17 rollback; docs/operations.md, docs/admin.md). The rule: while a pause is
-- open, no claim function returns work, on any replica, CLI worker or psql session; the receivers
-- and the App's journal keep recording; nothing is cancelled and no row is lost; and the time spent
-- paused does not count against the retry horizon (retry.horizon_sec), so a pause of any length
-- resumes without dead letters.
--
--   pause_sync(operator, reason)             opens a pause; claims stop within one poll interval;
--   status_pause                             the open pause, and the work claimed before it that is
--                                            still finishing (drained once it is all 0);
--   resume_preview()                         read-only: what waits, uncertain writes first;
--   resume_sync(operator, pause_id, reason)  the same summary, then ends the pause: the lanes wake
--                                            and the backlog goes out under the shared limiter.
--
-- The hot pause works beside BITRIX_SYNC_ENABLED, the deployment's master switch, which a replica
-- reads once at start (changing it needs a restart).
--
-- How paused time is kept out of the horizon, and why this way: _retry_deadline() (sql/retry/deadline.sql),
-- the one owner of the horizon, adds _paused_since(first attempt), the paused time since the row's
-- first attempt, while it is computed. Every retry function already computes the deadline there at
-- the moment it decides, for every kind of row (intents from created_at, webhooks from received_at,
-- commands from their first send, workflows from their creation or requeue). The other way, shifting
-- each live row's stored deadline on resume, would rewrite every waiting row in one statement (locks
-- on a big backlog, updated_at moved, which the unanswered-write wait reads) and would still miss the
-- kinds whose deadline is not stored (intents, webhooks). The stored deadline_at of a live command
-- or workflow is the horizon as computed at its last write; the next retry writes the new one. Waits
-- that are points in time (a retry's next_attempt_at, an unanswered write's awaiting_late_write)
-- only grow longer in a pause: they fall due at once when it ends.

create or replace function bitrix_sync.sync_paused() returns boolean
language sql stable parallel safe set search_path = pg_catalog, pg_temp as $$
  select exists (select 1 from bitrix_sync.sync_pauses p where p.resumed_at is null)
$$;
comment on function bitrix_sync.sync_paused() is
  'The pause gate (§17): true while a pause is open (pause_sync() until resume_sync()). Every claim function returns nothing while it is true, as before the cutover; readiness reports paused.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.sync_paused()', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'The pause gate of the claim functions, for readiness too.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._paused_since(p_from timestamptz) returns interval
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_paused interval;
begin
  -- The part of every pause after p_from, an open pause up to now. One row per pause ever: a
  -- handful, read whole.
  select sum(least(coalesce(p.resumed_at, now()), now()) - greatest(p.paused_at, p_from))
    into v_paused
    from bitrix_sync.sync_pauses p
   where coalesce(p.resumed_at, 'infinity'::timestamptz) > p_from
     and p.paused_at < now();
  return coalesce(greatest(v_paused, interval '0'), interval '0');
end $$;
comment on function bitrix_sync._paused_since(timestamptz) is
  'Internal: how long processing was paused since p_from (an open pause counts up to now). _retry_deadline() adds it, so paused time does not count against the retry horizon.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._paused_since(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of _retry_deadline, evaluated as the role that computes a deadline.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;


drop trigger if exists _120_immutable on bitrix_sync.sync_pauses;
create trigger _120_immutable before update on bitrix_sync.sync_pauses
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'id', 'paused_at', 'paused_by', 'paused_db_user', 'pause_reason');
comment on trigger _120_immutable on bitrix_sync.sync_pauses is
  'Who paused, when and why never change: the paused interval is what the retry horizon leaves out.';

drop trigger if exists _121_resumed_once on bitrix_sync.sync_pauses;
create trigger _121_resumed_once before update on bitrix_sync.sync_pauses
  for each row when (old.resumed_at is not null)
  execute function bitrix_sync.tg__refuse_immutable_change('resumed_at', 'resumed_by', 'resumed_db_user', 'resume_reason');
comment on trigger _121_resumed_once on bitrix_sync.sync_pauses is
  'A pause ends once: who resumed, when and why never change afterwards.';

drop trigger if exists _200_forbid_delete on bitrix_sync.sync_pauses;
create trigger _200_forbid_delete before delete on bitrix_sync.sync_pauses
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.sync_pauses is
  'Pauses are kept: deleting one would give its rows back the paused time against their retry horizon.';

