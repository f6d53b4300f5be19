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
-- How paused time is kept out of the horizon, and why this way: _retry_deadline() (sql/retry.sql),
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

create or replace view bitrix_sync.status_pause as
select p.id as pause_id, p.paused_at, p.paused_by::text as paused_by, p.paused_db_user::text as paused_db_user,
       p.pause_reason, extract(epoch from now() - p.paused_at)::bigint as paused_for_sec,
       h.intents_leased, h.workflows_running, h.commands_in_hand, h.webhooks_processing, h.requests_out,
       (h.intents_leased + h.workflows_running + h.commands_in_hand + h.webhooks_processing + h.requests_out = 0)
         as drained
  from bitrix_sync.sync_pauses p
 cross join lateral (
   -- Work claimed before the pause that is still finishing: live leases only (an expired one has
   -- nobody behind it and waits for the next claim), and the HTTP requests out (limiter slots).
   select (select count(*) from han_app.sync_queue q
            where q.status = 'leased' and q.locked_until > now()) as intents_leased,
          (select count(*) from bitrix_sync.workflow_instances w
            where w.state in ('created', 'running', 'waiting_retry') and w.state = 'running'
              and w.locked_until > now()) as workflows_running,
          (select count(*) from bitrix_sync.crm_commands c
            where c.status in ('leased', 'in_flight') and c.locked_until > now()) as commands_in_hand,
          (select count(*) from bitrix_sync.webhook_inbox w
            where w.status in ('received', 'retry_wait', 'processing') and w.status = 'processing'
              and w.locked_until > now()) as webhooks_processing,
          (select count(*) from bitrix_sync.crm_inflight_slots s where s.expires_at > now()) as requests_out
    offset 0 -- counted once, not again for drained
 ) h
 where p.resumed_at is null;
comment on view bitrix_sync.status_pause is
  'The open pause (no row when processing runs): since when, by whom (declared and login), why, for how long, and the work claimed before it that is still finishing: leased intents, running workflows, commands leased or in flight, webhooks processing, HTTP requests out. drained once all are 0. Read by /internal/sync/v1/status.';

create or replace function bitrix_sync.pause_sync(p_operator text, p_reason text)
returns setof bitrix_sync.status_pause
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_open bitrix_sync.sync_pauses;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  -- One pause or resume at a time; the claims' reads (ACCESS SHARE) are not held up.
  lock table bitrix_sync.sync_pauses in share row exclusive mode;
  select * into v_open from bitrix_sync.sync_pauses p where p.resumed_at is null;
  if found then
    raise exception 'processing is already paused (pause %, since %)', v_open.id, v_open.paused_at
      using errcode = 'BS070',
            hint = 'See select * from bitrix_sync.status_pause; to go on, look at select * from bitrix_sync.resume_preview(); then resume_sync(''ops:<you>'', <pause_id>, ''<why>'').';
  end if;
  insert into bitrix_sync.sync_pauses (paused_by, pause_reason) values (btrim(p_operator), btrim(p_reason));
  perform bitrix_sync._record_admin_action('pause_sync', null, null, null, null, p_reason, p_operator);
  return query select * from bitrix_sync.status_pause;
end $$;
comment on function bitrix_sync.pause_sync(text, text) is
  'Admin (§17): opens a pause. From its commit no claim function returns work (every replica stops taking work within one poll interval, without a restart); work already claimed finishes (status_pause.drained says when); receivers and the App''s journal keep recording; paused time does not count against the retry horizon. Audited (admin_actions). Returns the pause. BS004 missing operator or reason, BS070 already paused.';

create or replace function bitrix_sync.resume_preview()
returns table (section text, item text, count bigint, oldest_age_sec bigint, note text)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  with pause as (
    select * from bitrix_sync.status_pause
  ), unsure as (
    select c.command_type::text as command_type, c.status::text as status, c.count, c.oldest_age_sec
      from bitrix_sync.status_commands c
     where c.status in ('uncertain', 'reconcile')
  ), rows_ as (
    select 1 as ord, 'pause'::text as section,
           coalesce('pause ' || p.pause_id, 'not paused') as item,
           count(p.pause_id) as count, max(p.paused_for_sec) as oldest_age_sec,
           coalesce(max('by ' || p.paused_by || ': ' || p.pause_reason
                        || '. Paused time does not count against retry.horizon_sec. To resume: resume_sync(''ops:<you>'', '
                        || p.pause_id || ', ''<why>'')'),
                    'Processing runs; nothing to resume.') as note,
           0 as sub
      from (select 1) one left join pause p on true
     group by p.pause_id
    union all
    -- Writes sent with no answer: they may have landed. Their workflows look before they write
    -- again (a create is searched for, a non-idempotent change read again), but a portal that was
    -- down or changed by hand is worth a look first.
    select 2, 'uncertain_commands', u.command_type || ' ' || u.status, u.count, u.oldest_age_sec,
           case when row_number() over (order by u.command_type, u.status) = 1 then
             'Look at these first: writes sent without an answer, which may have landed. On resume their workflows search or read the Contact before writing again (docs/runbook.md, "Resuming after a pause").'
           end, row_number() over (order by u.command_type, u.status)
      from unsure u
    union all
    select 2, 'uncertain_commands', 'none', 0, null, 'No write is waiting for an answer.', 0
     where not exists (select 1 from unsure)
    union all
    select 3, 'in_hand', 'claimed before the pause, still finishing',
           coalesce(max(p.intents_leased + p.workflows_running + p.commands_in_hand + p.webhooks_processing
                        + p.requests_out), 0), null,
           case when coalesce(bool_and(p.drained), true) then 'Drained.' else 'Not drained yet: wait for status_pause.drained.' end,
           0
      from pause p
    union all
    select 4, 'workflows', w.state::text, sum(w.count)::bigint, max(w.oldest_age_sec), null, 0
      from bitrix_sync.status_workflows w
     group by w.state
    union all
    select 5, 'commands', c.status::text, sum(c.count)::bigint, max(c.oldest_age_sec), null, 0
      from bitrix_sync.status_commands c
     where c.status not in ('uncertain', 'reconcile', 'dead_letter')
     group by c.status
    union all
    select 6, 'queue', q.status::text, q.count, q.oldest_age_sec,
           case when q.status = 'pending' then 'oldest_age_sec: the oldest intent waiting' end, 0
      from bitrix_sync.status_queue q
     where q.status <> 'dead_letter'
    union all
    select 7, 'webhooks', w.receiver::text || ' ' || w.status::text, w.count, w.oldest_age_sec, null, 0
      from bitrix_sync.status_webhooks w
    union all
    select 8, 'dead_letters', 'open', coalesce(sum(d.count), 0)::bigint, max(d.oldest_age_sec),
           'Open technical dead letters (list_dead_letters()); a pause adds none.', 0
      from bitrix_sync.status_dead_letters d
  )
  select r.section, r.item, r.count, r.oldest_age_sec, r.note from rows_ r order by r.ord, r.sub, r.item
$$;
comment on function bitrix_sync.resume_preview() is
  'Admin, read-only (§17): what resuming releases, in the order to look at it: the pause, the writes sent without an answer (uncertain, reconcile) first, the work still finishing, open workflows by state, the command backlog, the queue with its oldest intent, the webhook inbox, open dead letters. resume_sync() returns the same rows.';

create or replace function bitrix_sync.resume_sync(p_operator text, p_confirm_pause_id bigint, p_reason text)
returns table (section text, item text, count bigint, oldest_age_sec bigint, note text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_open bitrix_sync.sync_pauses;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  lock table bitrix_sync.sync_pauses in share row exclusive mode;
  select * into v_open from bitrix_sync.sync_pauses p where p.resumed_at is null;
  if not found then
    raise exception 'processing is not paused'
      using errcode = 'BS071',
            hint = 'Nothing to resume: select * from bitrix_sync.sync_pauses order by id desc limit 1; shows the last pause.';
  end if;
  if p_confirm_pause_id is distinct from v_open.id then
    raise exception 'pause % is not the open pause (the open one is %, since %)', p_confirm_pause_id, v_open.id, v_open.paused_at
      using errcode = 'BS072',
            hint = 'Look at select * from bitrix_sync.resume_preview(); first, then confirm the open pause''s id.';
  end if;
  -- What waits, as it stands before anything moves.
  return query select * from bitrix_sync.resume_preview();
  update bitrix_sync.sync_pauses p
     set resumed_at = now(), resumed_by = btrim(p_operator), resumed_db_user = session_user,
         resume_reason = btrim(p_reason)
   where p.id = v_open.id;
  perform bitrix_sync._record_admin_action('resume_sync', null, null, null, null, p_reason, p_operator);
  -- The lanes wake at the commit instead of at their next poll. The backlog goes out at the pace of
  -- the shared limiter (limiter.*), as any backlog does: no burst.
  perform pg_notify('bitrix_sync_queue', '');
  perform pg_notify('bitrix_sync_workflows', '');
  perform pg_notify('bitrix_sync_commands', '');
  perform pg_notify('bitrix_sync_webhooks', '');
end $$;
comment on function bitrix_sync.resume_sync(text, bigint, text) is
  'Admin (§17): ends the open pause, confirmed by its id (from status_pause or resume_preview()). Returns resume_preview() as it stood, then from the commit the claim functions return work again and the lanes are woken; the backlog goes out under the shared limiter. Audited (admin_actions). BS004 missing operator or reason, BS071 not paused, BS072 the id is not the open pause''s.';

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

-- Privileges: sql/privileges.sql (the runtime reads the gate and the status view; the admin runs
-- the functions and reads the views).
