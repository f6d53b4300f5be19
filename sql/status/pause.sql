-- Pause and resume for the admin, beside the status views its summary reads (§17; docs/operations.md, docs/admin.md): the open pause and the work
-- still finishing (status_pause), what resuming releases (resume_preview), and the two audited
-- functions. The gate itself and the paused time the retry horizon leaves out: sql/pause/gate.sql.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_pause', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14, §17): the open pause, who and why, and the work still finishing.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.pause_sync(text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Pauses processing on every replica (§17), audited.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.resume_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Read-only: what resuming releases, uncertain writes first.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.resume_sync(text,bigint,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Ends the open pause after showing what waits, audited.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

