-- The convergence audit (§10.2: "decided separately from production metrics of losses and
-- discrepancies"; docs/workflows.md, "Convergence audit"). Webhooks and the incremental
-- reconciliation repair what changes; what a manager does that no robot reports (a Contact deleted,
-- the App's phone removed, the user id cleared, the registration flag unticked) or what a restore
-- from backup leaves behind stays out of step for ever. The audit (tasks/audit_convergence.ts,
-- src/audit/) compares App, snapshot and Contact for a sample of active links, read-only towards
-- both sides, and records what it finds here, one row per user and kind. An admin looks at
-- status_drift, asks repair_drift() to record the intents that bring each user back through the
-- ordinary workflows (§5), and reads one user's story with explain_user().
--
-- Who calls what: the runtime role runs the audit (claim, sample, record, finish: security definer,
-- fenced by the run's lease); the admin role reads the views and calls repair_drift, explain_user,
-- diagnose_app_values and request_convergence_audit (sql/privileges.sql). Errors: BS060, BS061
-- (docs/errors.md), BS001 for a run whose lease was taken over, BS004 for bad arguments.

------------------------------------------------------------------------------------------------
-- Shared pieces
------------------------------------------------------------------------------------------------

create or replace function bitrix_sync._drift_kind_group(p_kind text) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
  select case
    when p_kind in ('contact_missing', 'phone_missing', 'user_id_wrong', 'registered_wrong', 'crm_master_behind') then 'link'
    when p_kind in ('unmapped_user', 'inactive_user_linked') then 'user'
    when p_kind in ('registered_inactive_user', 'registered_unknown_user') then 'registered'
  end
$$;
comment on function bitrix_sync._drift_kind_group(text) is
  'Internal: which part of an audit run judges a drift kind: link (a link compared with its Contact), user (App users and links, in SQL), registered (the scan of registered Contacts); null for an unknown kind.';

create or replace function bitrix_sync._drift_repair_intent(p_kinds text[], p_eligible boolean) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
  select case
    -- The user is gone or inactive, or their Contact is registered against them: the deactivation
    -- turns the flag off and closes what is still open (§5.3).
    when p_kinds && array['inactive_user_linked', 'registered_inactive_user', 'registered_unknown_user'] then 'contact.deactivate'
    -- The linked Contact is gone: the update's not-found rule breaks the link, keeps the snapshot
    -- and raises contact_not_found for a person (§5.2); for an inactive user, the deactivation's (§5.3).
    when 'contact_missing' = any(p_kinds) then
      case when p_eligible then 'contact.update' else 'contact.deactivate' end
    -- Everything else is put right by map_or_create: it reads the linked Contact, applies its
    -- CRM-master fields, restores an emptied user id and the flag, and writes a missing phone
    -- (or, without a link, searches and links as for a new user, §5.1).
    when cardinality(p_kinds) > 0 then 'contact.map_or_create'
  end
$$;
comment on function bitrix_sync._drift_repair_intent(text[], boolean) is
  'Internal: the intent repair_drift records for a user with these drift kinds (p_eligible: identity and profile active): contact.deactivate, contact.update (a missing Contact of an active user) or contact.map_or_create.';

create or replace function bitrix_sync._mask_pii(p_value text) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
  -- §15: at most the first two and the last two readable characters; short values not at all, and
  -- the length is never shown.
  select case
    when p_value is null then null
    when length(pg_catalog.btrim(p_value)) < 8 then '***'
    else left(pg_catalog.btrim(p_value), 2) || '***' || right(pg_catalog.btrim(p_value), 2)
  end
$$;
comment on function bitrix_sync._mask_pii(text) is
  'Internal: a personal value as an admin may see it (§15): the first two and last two characters around ***, or *** alone for values shorter than 8 characters; null stays null.';

create or replace function bitrix_sync._drift_busy_users(p_since timestamptz, p_user_ids uuid[] default null)
returns table (user_id uuid)
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- Users the ordinary paths are working on, or worked on since the audit read their data: an
  -- intent recorded or queued, a workflow unfinished or moved since p_since, a snapshot written
  -- since p_since, a Contact webhook waiting. What the audit read of them may be out of date, and
  -- what is out of step may be on its way back: such users are judged by a later run. Only the
  -- users asked about, each through its own index (the journal, which the fold keeps short, aside):
  -- never a scan of the snapshots or the history.
  select j.user_id from han_app.sync_queue_journal j where j.user_id = any(p_user_ids)
  union
  select q.entity_id from han_app.sync_queue q
   where q.entity_id = any(p_user_ids) and q.status in ('pending', 'leased', 'retry_wait')
  union
  select w.user_id from bitrix_sync.workflow_instances w
   where w.user_id = any(p_user_ids)
     and (w.state not in ('succeeded', 'failed', 'cancelled') or w.finished_at >= p_since)
  union
  select s.user_id from bitrix_sync.contact_snapshots s
   where s.user_id = any(p_user_ids) and s.updated_at >= p_since
  union
  select m.entity_id from bitrix_sync.webhook_inbox i
    join bitrix_sync.entity_external_mapping m on m.external_id = i.entity_id and m.status = 'active'
   where i.status in ('received', 'retry_wait', 'processing') and i.receiver = 'contact'
     and m.entity_id = any(p_user_ids)
$$;
comment on function bitrix_sync._drift_busy_users(timestamptz, uuid[]) is
  'Internal: those of p_user_ids (null: none) with work in progress or done since p_since: an intent in the journal or the queue, a workflow unfinished or changed, a snapshot written, a Contact webhook waiting. The audit leaves their findings as they are this run.';

create or replace function bitrix_sync._check_audit_lease(p_lease_token uuid) returns bitrix_sync.audit_state
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
begin
  select * into v_row from bitrix_sync.audit_state s
   where s.singleton and s.last_run_status = 'running' and s.lease_token = p_lease_token;
  if not found then
    perform bitrix_sync._refuse_stale('convergence audit run', 'audit');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._check_audit_lease(uuid) is
  'Internal: the audit state when p_lease_token holds the running audit; BS001 otherwise (the run was taken over after audit.lease_sec).';

-- Every active link has an audit mark from the moment it is opened (audited_at = opened_at until
-- a run compares it), and loses it when it closes: the audit then finds the links it should
-- compare next, and those overdue, from the oldest mark on (audit_marks_due_idx) instead of
-- reading every link each run (docs/performance.md, "Scale").
create or replace function bitrix_sync.tg_entity_external_mapping__audit_mark() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  if tg_op = 'INSERT' then
    if new.status = 'active' then
      insert into bitrix_sync.audit_marks (mapping_id, user_id, audited_at)
      values (new.id, new.entity_id, new.opened_at)
      on conflict (mapping_id) do nothing;
    end if;
  elsif new.status is distinct from 'active' then
    delete from bitrix_sync.audit_marks k where k.mapping_id = new.id;
  end if;
  return null;
end $$;
comment on function bitrix_sync.tg_entity_external_mapping__audit_mark() is
  'Trigger (after insert, after update of status on entity_external_mapping): a link opened active gets its audit mark (audited_at = opened_at: never compared); a link that is no longer active loses it. Security definer: nobody else writes audit_marks.';

drop trigger if exists _950_audit_mark on bitrix_sync.entity_external_mapping;
create trigger _950_audit_mark after insert or update of status on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg_entity_external_mapping__audit_mark();
comment on trigger _950_audit_mark on bitrix_sync.entity_external_mapping is
  'Keeps one audit mark per active link (bitrix_sync.audit_marks).';

create or replace function bitrix_sync._planner_count(p_rel regclass) returns bigint
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- reltuples as the last VACUUM or ANALYZE left it (autovacuum keeps it within a few per cent).
  select c.reltuples::bigint from pg_catalog.pg_class c where c.oid = p_rel and c.reltuples >= 100000
$$;
comment on function bitrix_sync._planner_count(regclass) is
  'Internal: the planner''s count of a table''s rows or an index''s entries when it is 100 000 or more; null below, or never counted, where the caller counts exactly. Sizes an audit run (_active_link_count, refresh_user_drift).';

create or replace function bitrix_sync._active_link_count() returns bigint
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- The entries of the partial index of active links, or counted exactly when there are few.
  select coalesce(bitrix_sync._planner_count('bitrix_sync.entity_external_mapping_active_entity_uq'),
                  (select count(*) from bitrix_sync.entity_external_mapping m where m.status = 'active'))
$$;
comment on function bitrix_sync._active_link_count() is
  'Internal: how many links are active: counted exactly below 100 000, otherwise the planner''s count of entity_external_mapping_active_entity_uq (_planner_count). Sizes an audit run and fills status_audit.last_links.';

------------------------------------------------------------------------------------------------
-- A run: claim, sample, record, finish (the runtime role)
------------------------------------------------------------------------------------------------

create or replace function bitrix_sync.claim_audit_run(p_all boolean default false, p_force boolean default false)
returns table (lease_token uuid, mode text, started_at timestamptz, sample_limit integer,
               registered_after_id bigint, registered_pages integer, recheck_contact_ids bigint[])
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
  v_interval_sec integer := (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::integer;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('audit.lease_sec') #>> '{}')::integer);
  v_period_sec double precision := (bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer * 86400.0;
  v_enabled boolean := (bitrix_sync._active_setting('audit.enabled') #>> '{}')::boolean;
  v_links bigint;
  v_due bigint;
  v_mode text := case when coalesce(p_all, false) then 'all' else 'sample' end;
begin
  -- The processing gate (§17): nothing is judged before the cutover, nor while processing is
  -- paused (sql/pause.sql): a paused sync would show as drift.
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  select * into v_row from bitrix_sync.audit_state s where s.singleton for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= now() - v_lease then
    return; -- a run is in progress
  end if;
  if v_mode = 'sample' and not coalesce(p_force, false)
     and (not v_enabled or v_row.last_run_started_at > now() - make_interval(secs => v_interval_sec)) then
    return; -- switched off, or not due yet
  end if;
  update bitrix_sync.audit_state s
     set last_run_started_at = now(), last_run_mode = v_mode, last_run_status = 'running',
         lease_token = pg_catalog.gen_random_uuid(),
         registered_cycle_started_at = coalesce(s.registered_cycle_started_at, now())
   where s.singleton
  returning * into v_row;

  -- Spread over the period: each run takes its share of the links, and every link that would be
  -- overdue before the next run (never compared: its mark holds when it was opened). The share is
  -- sized from _active_link_count() (exact for small installations, the planner's count for large
  -- ones); the overdue ones are counted exactly, from the oldest mark on, through audit_marks_due_idx.
  v_links := bitrix_sync._active_link_count();
  select count(*) into v_due
    from bitrix_sync.audit_marks k
    join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
   where k.audited_at <= now() - make_interval(secs => v_period_sec - v_interval_sec);
  return query
  select v_row.lease_token, v_mode, v_row.last_run_started_at,
         case when v_mode = 'all' then null
              else greatest(ceil(v_links * v_interval_sec / v_period_sec), v_due)::integer end,
         case when v_mode = 'all' then 0::bigint else v_row.registered_after_id end,
         case when v_mode = 'all' then null
              else greatest(1, ceil((coalesce(v_row.registered_cycle_total, 0) / 50.0 + 1) * v_interval_sec / v_period_sec))::integer end,
         -- Contacts of open registered findings are read again by ID every run, so a repair is
         -- confirmed without waiting for the scan to come round.
         (select array_agg(x.c order by x.c)
            from (select distinct f.contact_id::bigint as c from bitrix_sync.drift_findings f
                   where bitrix_sync._drift_kind_group(f.kind) = 'registered' and f.contact_id is not null
                   order by 1 limit 2500) x);
end $$;
comment on function bitrix_sync.claim_audit_run(boolean, boolean) is
  'Starts a convergence audit run when none is running (one still marked running after audit.lease_sec is taken over) and, for a sampled run, when audit.enabled and audit.interval_sec has passed (or p_force). p_all: every active link and the whole registered scan. Returns the lease, how many links to sample (their share of audit.period_days plus those about to be overdue; null: all), where the registered scan goes on, how many pages this run reads (null: to the end), and the Contacts of open registered findings to read again. No row when nothing is to run, and none before perform_cutover() or while paused (pause_sync()).';

create or replace function bitrix_sync.audit_sample(p_lease_token uuid, p_limit integer default null)
returns table (mapping_id uuid, user_id uuid, contact_id text, has_findings boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_limit is not null and p_limit < 0 then
    raise exception 'an audit sample cannot have a negative size (%)', p_limit
      using errcode = 'BS004', hint = 'Pass null for every link, or the limit claim_audit_run returned.';
  end if;
  -- Active links of eligible users (the others are judged in SQL: inactive_user_linked). Links
  -- whose user has an open finding of the link kinds come first, so a repair is confirmed by the
  -- next run (a few: the open findings); then the least recently compared (never compared: by when
  -- they were opened), walked from the oldest mark through audit_marks_due_idx and stopped at
  -- p_limit, so a run reads its share of the links, not all of them.
  return query
  with flagged as (
    select m.id, m.entity_id, m.external_id::text as contact_id, k.audited_at
      from (select distinct f.user_id from bitrix_sync.drift_findings f
             where f.user_id is not null and bitrix_sync._drift_kind_group(f.kind) = 'link') f
      join bitrix_sync.entity_external_mapping m on m.entity_id = f.user_id and m.status = 'active'
      join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
      join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
      join bitrix_sync.audit_marks k on k.mapping_id = m.id
  ), rest as (
    select m.id, m.entity_id, m.external_id::text as contact_id, k.audited_at
      from bitrix_sync.audit_marks k
      join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
      join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
      join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
     where not exists (select 1 from flagged x where x.id = m.id)
     order by k.audited_at, k.mapping_id
     limit p_limit
  )
  select x.id, x.entity_id, x.contact_id, x.flagged
    from (select f.id, f.entity_id, f.contact_id, true as flagged, f.audited_at from flagged f
          union all
          select r.id, r.entity_id, r.contact_id, false, r.audited_at from rest r) x
   order by x.flagged desc, x.audited_at, x.id
   limit p_limit;
end $$;
comment on function bitrix_sync.audit_sample(uuid, integer) is
  'The links the running audit compares with their Contacts, under its lease: active links of active users, those whose user has an open link finding first, then the least recently compared; p_limit of them (null: all).';

create or replace function bitrix_sync.record_audit_findings(
  p_lease_token uuid, p_read_at timestamptz, p_results jsonb
) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_busy uuid[];
  v_ok uuid[];
  v_users uuid[];
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_read_at is null or jsonb_typeof(p_results) is distinct from 'array' then
    raise exception 'audit results need the time of the read and a JSON array'
      using errcode = 'BS004', hint = 'Pass [{"mapping_id", "user_id", "contact_id", "findings": [{"kind", "details"}]}].';
  end if;
  if exists (select 1 from jsonb_array_elements(p_results) r cross join jsonb_array_elements(coalesce(r -> 'findings', '[]')) f
              where bitrix_sync._drift_kind_group(f ->> 'kind') is distinct from 'link'
                 or jsonb_typeof(coalesce(f -> 'details', '{}')) <> 'object') then
    raise exception 'an audit result names a kind that is not judged on a link, or details that are not an object'
      using errcode = 'BS004', hint = 'Link kinds: contact_missing, phone_missing, user_id_wrong, registered_wrong, crm_master_behind.';
  end if;
  select array_agg(distinct (r ->> 'user_id')::uuid) into v_users from jsonb_array_elements(p_results) r;
  select array_agg(b.user_id) into v_busy from bitrix_sync._drift_busy_users(p_read_at, v_users) b;
  -- Judged: the link is still the active link it was when the Contact was read, and nothing has
  -- worked on the user since. The others keep their findings and are compared again soon.
  select array_agg(r.user_id) into v_ok
    from (select (x ->> 'mapping_id')::uuid as mapping_id, (x ->> 'user_id')::uuid as user_id,
                 x ->> 'contact_id' as contact_id
            from jsonb_array_elements(p_results) x) r
    join bitrix_sync.entity_external_mapping m
      on m.id = r.mapping_id and m.status = 'active' and m.entity_id = r.user_id and m.external_id = r.contact_id
   where not (r.user_id = any(coalesce(v_busy, '{}')));
  if v_ok is null then
    return 0;
  end if;

  insert into bitrix_sync.audit_marks as k (mapping_id, user_id, audited_at)
  select (x ->> 'mapping_id')::uuid, (x ->> 'user_id')::uuid, p_read_at
    from jsonb_array_elements(p_results) x
   where (x ->> 'user_id')::uuid = any(v_ok)
  on conflict (mapping_id) do update set audited_at = greatest(k.audited_at, excluded.audited_at);

  -- In step again: the user's link findings this result does not name.
  delete from bitrix_sync.drift_findings d
   where d.user_id = any(v_ok) and bitrix_sync._drift_kind_group(d.kind) = 'link'
     and not exists (select 1 from jsonb_array_elements(p_results) x
                       cross join jsonb_array_elements(coalesce(x -> 'findings', '[]')) f
                      where (x ->> 'user_id')::uuid = d.user_id and f ->> 'kind' = d.kind);

  insert into bitrix_sync.drift_findings as d (kind, user_id, contact_id, details, detected_at, last_seen_at)
  select f ->> 'kind', (x ->> 'user_id')::uuid, x ->> 'contact_id', coalesce(f -> 'details', '{}'), p_read_at, p_read_at
    from jsonb_array_elements(p_results) x
   cross join jsonb_array_elements(coalesce(x -> 'findings', '[]')) f
   where (x ->> 'user_id')::uuid = any(v_ok)
     -- A Contact that carries another user's id is a conflict a business alert already puts before
     -- a person (user_id_mismatch): not silent, and not repairable without a rebind.
     and not (f ->> 'kind' = 'user_id_wrong' and f -> 'details' ->> 'field' = 'other'
              and exists (select 1 from bitrix_sync.business_alerts a
                           where a.user_id = (x ->> 'user_id')::uuid and a.alert_type = 'user_id_mismatch'
                             and a.status = 'open'))
  on conflict (kind, (coalesce(user_id::text, 'contact:' || contact_id)))
  do update set contact_id = excluded.contact_id, details = excluded.details, last_seen_at = excluded.last_seen_at;

  delete from bitrix_sync.drift_findings d
   where d.kind = 'user_id_wrong' and d.user_id = any(v_ok) and d.details ->> 'field' = 'other'
     and exists (select 1 from bitrix_sync.business_alerts a
                  where a.user_id = d.user_id and a.alert_type = 'user_id_mismatch' and a.status = 'open');
  return cardinality(v_ok);
end $$;
comment on function bitrix_sync.record_audit_findings(uuid, timestamptz, jsonb) is
  'Records what the running audit found for links it compared with their Contacts (p_results: [{mapping_id, user_id, contact_id, findings: [{kind, details}]}], link kinds only; p_read_at: when the Contacts were read). A link no longer active as it was, or whose user had work in progress or done since the read, is left for a later run. For the others: the link''s audit mark, the findings named (one per user and kind; a user id of another user with an open user_id_mismatch alert is left to that alert), and the user''s other link findings deleted (in step again). Returns how many links were judged.';

create or replace function bitrix_sync.refresh_user_drift(p_lease_token uuid, p_read_at timestamptz)
returns integer
-- jit off: the window's query is costed above jit_above_cost from a few thousand users on, and
-- compiling it took 356 ms of a 400 ms run at 10 000 users (bench:scale).
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  v_state bitrix_sync.audit_state;
  v_busy uuid[];
  v_count integer;
  v_kinds text[];
  v_users uuid[];
  v_contacts text[];
  v_after uuid;
  v_upto uuid;
  v_window bigint;
begin
  v_state := bitrix_sync._check_audit_lease(p_lease_token);
  -- The users this run judges: a full run every one; a sampled run a window of them in id order,
  -- (v_after, v_upto], from where the last sampled run stopped (audit_state.users_after_id). The
  -- window is audit.users_per_run users, or twice the users' share of audit.period_days when that
  -- is more, so a round of windows ends within half the period. v_upto null: the window reaches
  -- past the last user, and the next run starts a new round from the first.
  if v_state.last_run_mode = 'sample' then
    v_after := v_state.users_after_id;
    v_window := greatest(
      (bitrix_sync._active_setting('audit.users_per_run') #>> '{}')::bigint,
      ceil(2.0 * coalesce(bitrix_sync._planner_count('han_app.user_identity'),
                          (select count(*) from han_app.user_identity))
           * (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::integer
           / ((bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer * 86400.0))::bigint);
    if v_after is null then
      select u.id into v_upto from han_app.user_identity u order by u.id offset v_window - 1 limit 1;
    else
      select u.id into v_upto from han_app.user_identity u where u.id > v_after order by u.id offset v_window - 1 limit 1;
    end if;
    -- A window that ends on the last user ends the round (the next run would judge nobody). The
    -- next user is looked up in key order (an EXISTS was planned as a Seq Scan that, at the end of
    -- a round, reads every user).
    if v_upto is not null then
      perform 1 from (select u.id from han_app.user_identity u where u.id > v_upto order by u.id limit 1) n;
      if not found then
        v_upto := null;
      end if;
    end if;
  end if;

  -- Link findings of a link that is no longer active (broken by a not-found rule, closed,
  -- relinked) have nothing left to compare (the findings are few: every run looks at all).
  delete from bitrix_sync.drift_findings d
   where bitrix_sync._drift_kind_group(d.kind) = 'link'
     and not exists (select 1 from bitrix_sync.entity_external_mapping m
                      where m.status = 'active' and m.entity_id = d.user_id and m.external_id = d.contact_id);

  -- One pass over the window's users (user_identity's primary key), each with its profile's status
  -- and whether it has an active link (an index-only probe of entity_external_mapping_active_entity_uq:
  -- external_system and entity_type are constants, by CHECK); the Contact of a link is read only
  -- for a finding. Then the active links in the window whose user the App no longer has. Each range
  -- predicate is written (v_after is null or ... > v_after) and (v_upto is null or ... <= v_upto):
  -- the plans are custom (the values known), an index range scan of the window.
  select array_agg(t.kind), array_agg(t.user_id), array_agg(t.contact_id) into v_kinds, v_users, v_contacts
    from (
  select case when x.linked then 'inactive_user_linked' else 'unmapped_user' end::text as kind,
         x.id as user_id,
         case when x.linked then
           (select m.external_id::text from bitrix_sync.entity_external_mapping m
             where m.external_system = 'bitrix24' and m.entity_type = 'user' and m.entity_id = x.id
               and m.status = 'active')
         end as contact_id
    from (
      -- The profile by its key, one probe per user (a join was planned as a hash of every profile).
      select u.id, u.created_at,
             u.record_status is not distinct from 'active'
               and (select p.record_status from han_app.client_profile p where p.user_id = u.id)
                   is not distinct from 'active' as active,
             exists (select 1 from bitrix_sync.entity_external_mapping m
                      where m.external_system = 'bitrix24' and m.entity_type = 'user' and m.entity_id = u.id
                        and m.status = 'active') as linked
        from han_app.user_identity u
       where (v_after is null or u.id > v_after) and (v_upto is null or u.id <= v_upto)
    ) x
   where
     -- An active link of a user who is no longer active: contact.deactivate should have closed it
     -- and turned the flag off.
     (x.linked and not x.active)
     -- An active App user without an active link and nothing on the way: no open business alert
     -- (a person has it; work in progress is taken out below). Users from before the cutover who
     -- never had an intent stay out (§17: no backfill).
     or (not x.linked and x.active
         and not exists (select 1 from bitrix_sync.business_alerts a where a.user_id = x.id and a.status = 'open')
         and (x.created_at >= (select c.cutover_watermark from bitrix_sync.cutover c)
              or exists (select 1 from bitrix_sync.entity_external_mapping m where m.entity_id = x.id)
              or exists (select 1 from bitrix_sync.workflow_instances w where w.user_id = x.id)))
  union all
  -- An active link of a user the App no longer has.
  select 'inactive_user_linked', m.entity_id, m.external_id::text
    from bitrix_sync.entity_external_mapping m
   where m.external_system = 'bitrix24' and m.entity_type = 'user' and m.status = 'active'
     and (v_after is null or m.entity_id > v_after) and (v_upto is null or m.entity_id <= v_upto)
     and not exists (select 1 from han_app.user_identity u where u.id = m.entity_id)
    ) t;

  -- Users with work in progress (or done since the read) are left as they are this run: neither
  -- found nor cleared. Asked of the few users concerned (those found, and those with a finding of
  -- the user kinds in the window), never of every user.
  select array_agg(b.user_id) into v_busy
    from bitrix_sync._drift_busy_users(
           p_read_at,
           coalesce(v_users, '{}') || coalesce((
             select array_agg(d.user_id) from bitrix_sync.drift_findings d
              where bitrix_sync._drift_kind_group(d.kind) = 'user' and d.user_id is not null
                and (v_after is null or d.user_id > v_after) and (v_upto is null or d.user_id <= v_upto)), '{}')) b;
  v_busy := coalesce(v_busy, '{}');

  -- Findings of the user kinds within the window that this run did not find again are cleared;
  -- those outside it wait for their window.
  delete from bitrix_sync.drift_findings d
   where bitrix_sync._drift_kind_group(d.kind) = 'user'
     and (v_after is null or d.user_id > v_after) and (v_upto is null or d.user_id <= v_upto)
     and not (d.user_id = any(v_busy))
     and not exists (select 1 from unnest(v_kinds, v_users) x(kind, user_id)
                      where x.kind = d.kind and x.user_id = d.user_id);
  insert into bitrix_sync.drift_findings as d (kind, user_id, contact_id, detected_at, last_seen_at)
  select x.kind, x.user_id, x.contact_id, p_read_at, p_read_at
    from unnest(v_kinds, v_users, v_contacts) x(kind, user_id, contact_id)
   where not (x.user_id = any(v_busy))
  on conflict (kind, (coalesce(user_id::text, 'contact:' || contact_id)))
  do update set contact_id = excluded.contact_id, last_seen_at = excluded.last_seen_at;
  get diagnostics v_count = row_count;

  if v_state.last_run_mode = 'sample' then
    update bitrix_sync.audit_state s
       set users_after_id = v_upto,
           users_round_started_at = case when v_after is null then p_read_at else s.users_round_started_at end,
           users_round_ended_at = case when v_upto is null then p_read_at else s.users_round_ended_at end
     where s.singleton;
  end if;
  return v_count;
end $$;
comment on function bitrix_sync.refresh_user_drift(uuid, timestamptz) is
  'Judges the user kinds of the running audit, in SQL, without the CRM: unmapped_user (active user without an active link, no work in progress, no open business alert; users from before the cutover who never had an intent are left out, §17) and inactive_user_linked (an active link of a user who is not active). A full run judges every user; a sampled run the next window of users in id order (audit.users_per_run, or twice the users'' share of audit.period_days when more), from where the last one stopped (audit_state.users_after_id), so its cost follows the window, not the installation. Also drops link findings of links that are no longer active. Users with work in progress keep their findings. Returns how many findings of the window it holds now.';

create or replace function bitrix_sync.record_registered_contacts(
  p_lease_token uuid, p_read_at timestamptz, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[],
  p_rows jsonb
) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_busy uuid[];
  v_count integer;
  v_kinds text[];
  v_users uuid[];
  v_contacts text[];
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_read_at is null or jsonb_typeof(p_rows) is distinct from 'array' or (p_from_id is null) <> (p_to_id is null)
     or p_from_id > p_to_id then
    raise exception 'registered Contacts need the time of the read, a JSON array and a Contact ID range (or none)'
      using errcode = 'BS004', hint = 'Pass [{"contact_id", "user_id"}] of the Contacts listed with the registration flag set, the range (from, to] they were listed in, and/or the IDs read one by one.';
  end if;
  select array_agg(t.kind), array_agg(t.user_id), array_agg(t.contact_id) into v_kinds, v_users, v_contacts
    from (
  select distinct on (j.kind, coalesce(j.user_id::text, 'contact:' || j.contact_id)) j.kind, j.user_id, j.contact_id
    from (
      select case when u.id is null then 'registered_unknown_user' else 'registered_inactive_user' end as kind,
             r.user_id, r.contact_id, u.id as app_user, u.record_status, p.record_status as profile_status
        from (select (x ->> 'contact_id')::bigint::text as contact_id,
                     case when x ->> 'user_id' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                          then (x ->> 'user_id')::uuid end as user_id
                from jsonb_array_elements(p_rows) x) r
        left join han_app.user_identity u on u.id = r.user_id
        left join han_app.client_profile p on p.user_id = u.id
       -- A linked Contact is judged with its link (registered_wrong, inactive_user_linked).
       where not exists (select 1 from bitrix_sync.entity_external_mapping m
                          where m.status = 'active' and m.external_id = r.contact_id)
    ) j
   -- Registered for an active user without a link: unmapped_user says it (map_or_create finds it).
   where not (j.app_user is not null and j.record_status = 'active' and j.profile_status is not distinct from 'active')
   order by j.kind, coalesce(j.user_id::text, 'contact:' || j.contact_id), j.contact_id::bigint
    ) t;

  -- Users with work in progress (or done since the read) are left as they are: neither flagged nor
  -- cleared. Asked of those flagged and those with a registered finding this read may clear.
  select array_agg(b.user_id) into v_busy
    from bitrix_sync._drift_busy_users(
           p_read_at,
           array_remove(v_users, null) || array(select d.user_id from bitrix_sync.drift_findings d
                                                where bitrix_sync._drift_kind_group(d.kind) = 'registered'
                                                  and d.user_id is not null)) b;
  v_busy := coalesce(v_busy, '{}');

  -- In step again: registered findings of the Contacts this read covered and did not flag.
  delete from bitrix_sync.drift_findings d
   where bitrix_sync._drift_kind_group(d.kind) = 'registered'
     and ((p_from_id is not null and d.contact_id::bigint > p_from_id and d.contact_id::bigint <= p_to_id)
          or d.contact_id::bigint = any(coalesce(p_checked_ids, '{}')))
     and not (d.user_id is not null and d.user_id = any(v_busy))
     and not exists (select 1 from unnest(v_kinds, v_users, v_contacts) x(kind, user_id, contact_id)
                      where x.kind = d.kind and coalesce(x.user_id::text, 'contact:' || x.contact_id)
                                              = coalesce(d.user_id::text, 'contact:' || d.contact_id));
  insert into bitrix_sync.drift_findings as d (kind, user_id, contact_id, detected_at, last_seen_at)
  select x.kind, x.user_id, x.contact_id, p_read_at, p_read_at
    from unnest(v_kinds, v_users, v_contacts) x(kind, user_id, contact_id)
   where not (x.user_id is not null and x.user_id = any(v_busy))
  on conflict (kind, (coalesce(user_id::text, 'contact:' || contact_id)))
  do update set contact_id = excluded.contact_id, last_seen_at = excluded.last_seen_at;
  get diagnostics v_count = row_count;
  return v_count;
end $$;
comment on function bitrix_sync.record_registered_contacts(uuid, timestamptz, bigint, bigint, bigint[], jsonb) is
  'Records what the running audit found among Contacts with the registration flag set (p_rows: [{contact_id, user_id as the Contact carries it}]): unlinked Contacts registered for a user who is not active (registered_inactive_user) or whom the App does not know, or no readable user id (registered_unknown_user). Registered findings of Contacts in (p_from_id, p_to_id] (a page of the scan) or in p_checked_ids (read by ID) that the rows do not flag are deleted. Users with work in progress keep their findings. Returns how many findings the rows flag.';

create or replace function bitrix_sync.advance_registered_scan(
  p_lease_token uuid, p_after_id bigint, p_listed integer, p_complete boolean
) returns bitrix_sync.audit_state
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
begin
  perform bitrix_sync._check_audit_lease(p_lease_token);
  if p_after_id is null or p_after_id < 0 or p_listed is null or p_listed < 0 or p_complete is null then
    raise exception 'the registered scan moves to a Contact ID (>= 0) with a count of listed Contacts'
      using errcode = 'BS004', hint = 'Pass the highest Contact ID listed, how many were listed, and whether the list ended.';
  end if;
  update bitrix_sync.audit_state s
     set registered_after_id = case when p_complete then 0 else p_after_id end,
         registered_cycle_seen = case when p_complete then 0 else s.registered_cycle_seen + p_listed end,
         registered_cycle_total = case when p_complete then s.registered_cycle_seen + p_listed else s.registered_cycle_total end,
         registered_cycle_finished_at = case when p_complete then now() else s.registered_cycle_finished_at end,
         registered_cycle_started_at = case when p_complete then null else s.registered_cycle_started_at end
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.advance_registered_scan(uuid, bigint, integer, boolean) is
  'Moves the running audit''s scan of registered Contacts on: the next page starts above p_after_id; p_complete (the list ended) starts a new cycle and keeps the cycle''s count, which sizes the pages of later sampled runs.';

create or replace function bitrix_sync.finish_audit_run(p_lease_token uuid, p_audited integer, p_requests integer)
returns bitrix_sync.audit_state
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
  v_period interval := make_interval(days => (bitrix_sync._active_setting('audit.period_days') #>> '{}')::integer);
  v_links integer;
  v_overdue integer;
begin
  v_row := bitrix_sync._check_audit_lease(p_lease_token);
  if p_audited is null or p_audited < 0 or p_requests is null or p_requests < 0 then
    raise exception 'an audit run finishes with the number of links compared and of requests sent'
      using errcode = 'BS004', hint = 'Both are counts (>= 0).';
  end if;
  -- The active links (sized as claim_audit_run sizes a run), and those of eligible users not
  -- compared within the period, counted from the oldest mark on through audit_marks_due_idx.
  v_links := bitrix_sync._active_link_count();
  select count(*) into v_overdue
    from bitrix_sync.audit_marks k
    join bitrix_sync.entity_external_mapping m on m.id = k.mapping_id and m.status = 'active'
    join han_app.user_identity u on u.id = m.entity_id and u.record_status = 'active'
    join han_app.client_profile p on p.user_id = m.entity_id and p.record_status = 'active'
   where k.audited_at < now() - v_period;
  update bitrix_sync.audit_state s
     set last_run_status = 'succeeded', lease_token = null, last_success_at = now(),
         last_all_success_at = case when s.last_run_mode = 'all' then now() else s.last_all_success_at end,
         last_error_code = null, last_audited = p_audited, last_requests = p_requests,
         last_links = v_links, last_overdue = v_overdue
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.finish_audit_run(uuid, integer, integer) is
  'running -> succeeded: records the counts, the active links (_active_link_count()) and how many active links of eligible users are overdue (not compared within audit.period_days). Refuses a run whose lease was taken over (BS001).';

create or replace function bitrix_sync.fail_audit_run(p_lease_token uuid, p_error_code text)
returns bitrix_sync.audit_state
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.audit_state;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_audit_lease(p_lease_token);
  update bitrix_sync.audit_state s
     set last_run_status = 'failed', lease_token = null, last_error_code = p_error_code
   where s.singleton
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.fail_audit_run(uuid, text) is
  'running -> failed with a safe code. What the run recorded before it failed stays; the next run goes on. Refuses a run whose lease was taken over (BS001).';

------------------------------------------------------------------------------------------------
-- Repair: the intents that bring drifted users back through the ordinary workflows (§5)
------------------------------------------------------------------------------------------------

create or replace function bitrix_sync._repair_drift(
  p_requested_by text, p_reason text, p_user_ids uuid[], p_kinds text[], p_dry_run boolean,
  p_admin_action boolean, p_only_unrepaired boolean
) returns table (user_id uuid, contact_id text, kinds text[], intent text, recorded boolean)
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_missing uuid[];
  v_action bigint;
  v_plan jsonb;
begin
  if p_user_ids is not null then
    select array_agg(x) into v_missing
      from unnest(p_user_ids) x
     where not exists (select 1 from bitrix_sync.drift_findings f where f.user_id = x);
    if v_missing is not null then
      raise exception '% of the users named have no open drift finding (first: %)', cardinality(v_missing), v_missing[1]
        using errcode = 'BS061',
              hint = 'Nothing was recorded. Repair only users listed in bitrix_sync.status_drift; a finding disappears when an audit finds the user in step again.';
    end if;
  end if;

  select coalesce(jsonb_agg(jsonb_build_object('user_id', g.user_id, 'contact_id', g.contact_id, 'kinds', g.kinds,
                                             'intent', bitrix_sync._drift_repair_intent(g.kinds, g.eligible))
                   order by g.user_id), '[]'::jsonb)
    into v_plan
    from (select f.user_id, min(f.contact_id::text) as contact_id,
                 array_agg(distinct f.kind::text order by f.kind::text) as kinds,
                 coalesce(bool_and(u.record_status = 'active' and p.record_status = 'active'), false) as eligible
            from bitrix_sync.drift_findings f
            left join han_app.user_identity u on u.id = f.user_id
            left join han_app.client_profile p on p.user_id = f.user_id
           where f.user_id is not null
             and (p_user_ids is null or f.user_id = any(p_user_ids))
             and (p_kinds is null or f.kind = any(p_kinds))
             and (not p_only_unrepaired or f.repair_requested_at is null)
           group by f.user_id) g;

  if not p_dry_run and jsonb_array_length(v_plan) > 0 then
    if p_admin_action then
      v_action := bitrix_sync._record_admin_action('repair_drift', null, null, null, null, p_reason, p_requested_by);
    end if;
    -- The ordinary intake: one journal row per user, as the App's trigger writes them; the fold
    -- coalesces it with whatever the App recorded meanwhile. reason drift_repair gives the intent a
    -- content hash of its own, so it is not skipped as equal to the user's last workflow.
    insert into han_app.sync_queue_journal (task_type, user_id, reason, source_updated_at)
    select r.intent, r.user_id, 'drift_repair', now() from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text) order by r.user_id;
    insert into bitrix_sync.drift_repairs (admin_action_id, user_id, contact_id, kinds, intent, requested_by, reason)
    select v_action, r.user_id, r.contact_id, r.kinds, r.intent, btrim(p_requested_by), btrim(p_reason)
      from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text) order by r.user_id;
    update bitrix_sync.drift_findings f
       set repair_requested_at = now(), repair_intent = r.intent
      from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text)
     where f.user_id = r.user_id and (p_kinds is null or f.kind = any(p_kinds));
    -- Wake a sync loop asleep on the intake watch, as the App's trigger does (sql/enqueue.sql).
    if not pg_try_advisory_xact_lock_shared(727014, 1) then
      perform pg_notify('bitrix_sync_queue', 'drift_repair');
    end if;
  end if;

  return query
  select r.user_id, r.contact_id, r.kinds, r.intent, not p_dry_run
    from jsonb_to_recordset(v_plan) r(user_id uuid, contact_id text, kinds text[], intent text)
  union all
  -- Contacts registered without a readable user id: no user to run a workflow for. A manager
  -- clears the flag in the CRM; listed, never recorded.
  select null::uuid, f.contact_id::text, array[f.kind::text], 'manual'::text, false
    from bitrix_sync.drift_findings f
   where f.user_id is null and p_user_ids is null and (p_kinds is null or f.kind = any(p_kinds))
   order by 1 nulls last, 2;
end $$;
comment on function bitrix_sync._repair_drift(text, text, uuid[], text[], boolean, boolean, boolean) is
  'Internal: plans (and, unless p_dry_run, records) one intent per drifted user (of p_user_ids, all when null; findings of p_kinds, all when null; p_only_unrepaired: findings no repair has touched): appended to han_app.sync_queue_journal with reason drift_repair, audited in drift_repairs (and admin_actions when p_admin_action), the findings marked. BS061 when a named user has no open finding.';

create or replace function bitrix_sync.repair_drift(
  p_requested_by text, p_reason text, p_user_ids uuid[] default null, p_dry_run boolean default false
) returns table (user_id uuid, contact_id text, kinds text[], intent text, recorded boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  if p_user_ids is not null and cardinality(p_user_ids) = 0 then
    raise exception 'an empty list of users names nobody to repair'
      using errcode = 'BS004', hint = 'Pass null to repair every drifted user, or the user ids from bitrix_sync.status_drift.';
  end if;
  return query
  select r.user_id, r.contact_id, r.kinds, r.intent, r.recorded
    from bitrix_sync._repair_drift(p_requested_by, p_reason, p_user_ids, null, coalesce(p_dry_run, false), true, false) r;
end $$;
comment on function bitrix_sync.repair_drift(text, text, uuid[], boolean) is
  'Admin: for each drifted user of bitrix_sync.status_drift (p_user_ids, or all when null) records the intent that brings the user back through the ordinary workflows (§5): contact.map_or_create for App-master and CRM-master drift and a missing link, contact.update for a deleted Contact (§5.2 not-found rule), contact.deactivate for an inactive or unknown user''s link or registration (§5.3). Audited (drift_repairs with the operator, the reason and session_user; one admin_actions row). Returns one row per user acted on (recorded true), or with p_dry_run the same rows without recording anything; Contacts registered without a readable user id are listed as manual. BS004 without a reason or operator, BS061 for a user without an open finding.';

create or replace function bitrix_sync.auto_repair_drift(p_kinds text[]) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_count integer;
begin
  if p_kinds is null or cardinality(p_kinds) = 0 then
    return 0;
  end if;
  if exists (select 1 from unnest(p_kinds) k where bitrix_sync._drift_kind_group(k) is null) then
    raise exception 'an automatic repair names a kind that does not exist'
      using errcode = 'BS004', hint = 'Kinds are the entries of audit.auto_repair_kinds.';
  end if;
  select count(*) into v_count
    from bitrix_sync._repair_drift('audit:auto', 'automatic repair after the convergence audit (audit.auto_repair_kinds)',
                                   null, p_kinds, false, false, true) r
   where r.recorded;
  return v_count;
end $$;
comment on function bitrix_sync.auto_repair_drift(text[]) is
  'The audit''s automatic repair (setting audit.auto_repair_kinds): repair_drift for findings of p_kinds that no repair has touched yet (a finding a repair did not fix waits for an admin), audited in drift_repairs as audit:auto. Returns how many users it recorded intents for.';

------------------------------------------------------------------------------------------------
-- What the admin reads
------------------------------------------------------------------------------------------------

create or replace view bitrix_sync.status_drift as
select f.user_id, f.contact_id, f.kind, f.detected_at, f.last_seen_at, f.details,
       f.repair_requested_at, f.repair_intent,
       case when f.user_id is null then 'manual'
            else bitrix_sync._drift_repair_intent(array[f.kind::text],
                   coalesce(u.record_status = 'active' and p.record_status = 'active', false)) end as repair
  from bitrix_sync.drift_findings f
  left join han_app.user_identity u on u.id = f.user_id
  left join han_app.client_profile p on p.user_id = f.user_id;
comment on view bitrix_sync.status_drift is
  'Silent drift the convergence audit found, one row per user (or Contact without a user id) and kind: since when, last seen, safe details, whether a repair was recorded, and the intent repair_drift would record for this kind (manual: a person clears it in the CRM). Rows disappear when an audit finds them in step.';

create or replace view bitrix_sync.status_audit as
select s.last_run_mode as mode, s.last_run_status as status, s.last_run_started_at, s.last_success_at,
       s.last_all_success_at, s.last_error_code, s.last_audited, s.last_requests, s.last_links,
       s.last_overdue, s.registered_after_id, s.registered_cycle_seen, s.registered_cycle_total,
       s.registered_cycle_finished_at,
       (select count(*) from bitrix_sync.drift_findings)::bigint as open_findings,
       s.users_round_started_at, s.users_round_ended_at
  from bitrix_sync.audit_state s;
comment on view bitrix_sync.status_audit is
  'The convergence audit at a glance: the last run (mode, status, when, counts, error code), the last success and full run, links overdue, where the scan of registered Contacts is, how many findings are open, and when the sampled runs'' round over the users (the user kinds) started and when the last one ended.';

create or replace view bitrix_sync.status_reconciliation as
select r.job_type, r.watermark, r.overlap, r.last_run_started_at, r.last_success_at, r.last_run_status,
       r.last_error_code, r.last_scanned, r.last_updated, r.last_recovered, r.recovered_baseline,
       r.failed_runs, r.retry_at
  from bitrix_sync.reconciliation_cursors r;
comment on view bitrix_sync.status_reconciliation is
  'The reconciliation runs'' cursors (§10.2, §10.3) as an admin reads them: watermark, last run and its counts, last success, runs failed in a row and when a failed one runs again; no lease.';

create or replace function bitrix_sync.worker_jobs()
returns table (id bigint, task_identifier text, run_at timestamptz, attempts smallint, max_attempts smallint,
               failed boolean, locked_by text, locked_at timestamptz, key text)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  -- graphile-worker's public view; its payloads and error texts stay out.
  return query
  select j.id, j.task_identifier::text, j.run_at, j.attempts, j.max_attempts, j.last_error is not null,
         j.locked_by::text, j.locked_at, j.key::text
    from graphile_worker.jobs j
   where j.task_identifier in ('sync_loop', 'reconcile_contacts', 'reconcile_alerts', 'retention', 'audit_convergence')
   order by j.run_at;
end $$;
comment on function bitrix_sync.worker_jobs() is
  'Admin: the service''s graphile-worker jobs (sync_loop, reconciliations, retention, audit_convergence) with when they run, attempts, whether the last one failed, and who holds them; no payload, no error text.';

create or replace function bitrix_sync.analyze_engine_tables() returns void
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  analyze bitrix_sync.workflow_instances, bitrix_sync.crm_commands, han_app.sync_queue;
end $$;
comment on function bitrix_sync.analyze_engine_tables() is
  'Admin: ANALYZE of the engine''s busiest tables (workflow_instances, crm_commands, sync_queue) after a large backlog appeared, so the planner sees the live rows (docs/runbook.md, BitrixSyncLagOverSla).';

create or replace function bitrix_sync.request_convergence_audit(
  p_requested_by text, p_reason text, p_all boolean default true
) returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_job_id bigint;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  perform bitrix_sync._record_admin_action(
    case when coalesce(p_all, true) then 'request_full_audit' else 'request_audit' end,
    null, null, null, null, p_reason, p_requested_by);
  select (graphile_worker.add_job(
            'audit_convergence',
            json_build_object('all', coalesce(p_all, true), 'force', true),
            job_key := case when coalesce(p_all, true) then 'audit_convergence_all' else 'audit_convergence_now' end,
            max_attempts := 25)).id
    into v_job_id;
  return v_job_id;
end $$;
comment on function bitrix_sync.request_convergence_audit(text, text, boolean) is
  'Admin: queues a convergence audit run now (graphile-worker job audit_convergence): with p_all (the default) every active link and the whole scan of registered Contacts, e.g. after a restore from backup or an incident; otherwise a sampled run. Audited in admin_actions. Returns the job id. The run itself happens in the service within seconds (graphile-worker retries it while another run holds the audit).';

create or replace function bitrix_sync.explain_user(p_user_id uuid)
returns table (at timestamptz, source text, event text, detail jsonb)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_contacts text[];
  v_workflows uuid[];
begin
  if p_user_id is null then
    raise exception 'explain_user needs a user id'
      using errcode = 'BS004', hint = 'Pass the App user''s UUID (han_app.user_identity.id), e.g. from bitrix_sync.status_drift.';
  end if;
  select array_agg(distinct c) into v_contacts
    from (select m.external_id::text as c from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id
          union select s.contact_id from bitrix_sync.contact_snapshots s where s.user_id = p_user_id
          union select f.contact_id from bitrix_sync.drift_findings f where f.user_id = p_user_id and f.contact_id is not null) x;
  select array_agg(w.id) into v_workflows from bitrix_sync.workflow_instances w where w.user_id = p_user_id;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id)
     and v_contacts is null and v_workflows is null
     and not exists (select 1 from han_app.sync_queue q where q.entity_id = p_user_id)
     and not exists (select 1 from han_app.sync_queue_journal j where j.user_id = p_user_id)
     and not exists (select 1 from bitrix_sync.business_alerts a where a.user_id = p_user_id)
     and not exists (select 1 from bitrix_sync.drift_repairs r where r.user_id = p_user_id) then
    raise exception 'user % is known neither to the App nor to bitrix-sync', p_user_id
      using errcode = 'BS060',
            hint = 'Check the id: it is han_app.user_identity.id (status_drift, parked_workflows and rebind_request_status show it).';
  end if;
  v_contacts := coalesce(v_contacts, '{}');
  v_workflows := coalesce(v_workflows, '{}');

  return query
  select e.at, e.source, e.event, e.detail from (
    -- The App's own rows: statuses, times, and personal values masked (§15).
    select u.created_at as at, 'app'::text as source, 'identity_created'::text as event,
           jsonb_build_object('status', u.record_status, 'phone', bitrix_sync._mask_pii(u.phone_number)) as detail, 1 as ord
      from han_app.user_identity u where u.id = p_user_id
    union all
    select u.updated_at, 'app', 'identity_now',
           jsonb_build_object('status', u.record_status, 'phone', bitrix_sync._mask_pii(u.phone_number)), 2
      from han_app.user_identity u where u.id = p_user_id and u.updated_at > u.created_at
    union all
    select p.created_at, 'app', 'profile_created', jsonb_build_object('status', p.record_status), 1
      from han_app.client_profile p where p.user_id = p_user_id
    union all
    select greatest(p.updated_at, p.created_at), 'app', 'profile_now',
           jsonb_build_object('status', p.record_status, 'full_name', bitrix_sync._mask_pii(p.full_name),
                              'email', bitrix_sync._mask_pii(p.email), 'citizenship', bitrix_sync._mask_pii(p.citizenship),
                              'source_updated_at', p.source_updated_at), 2
      from han_app.client_profile p where p.user_id = p_user_id
    union all
    -- Intents: recorded (not folded yet), and queued.
    select j.recorded_at, 'intent', j.task_type,
           jsonb_build_object('status', 'recorded', 'reason', j.reason), 3
      from han_app.sync_queue_journal j where j.user_id = p_user_id
    union all
    select q.created_at, 'intent', q.task_type::text,
           jsonb_build_object('id', q.id, 'status', q.status, 'reason', q.payload_json ->> 'reason',
                              'attempts', q.attempt_count, 'completed_at', q.completed_at,
                              'cancel_reason', q.cancel_reason, 'last_error_code', q.last_error_code), 3
      from han_app.sync_queue q where q.entity_type = 'user' and q.entity_id = p_user_id
    union all
    -- Workflows and their steps.
    select w.created_at, 'workflow', 'started',
           jsonb_build_object('id', w.id, 'type', w.workflow_type, 'intent', w.intent_type, 'correlation_id', w.correlation_id), 4
      from bitrix_sync.workflow_instances w where w.user_id = p_user_id
    union all
    select coalesce(w.finished_at, w.updated_at), 'workflow',
           case when w.state in ('succeeded', 'failed', 'cancelled') then 'finished' else 'now' end,
           jsonb_build_object('id', w.id, 'type', w.workflow_type, 'state', w.state, 'step', w.current_step,
                              'outcome', w.outcome, 'last_error_code', w.last_error_code, 'revision', w.revision,
                              'step_data', w.step_data, 'next_attempt_at', w.next_attempt_at), 6
      from bitrix_sync.workflow_instances w where w.user_id = p_user_id
    union all
    -- Commands and their outcomes (parameters and results are safe projections: IDs, flags, hashes).
    select c.created_at, 'command', c.command_type::text,
           jsonb_build_object('id', c.id, 'workflow_id', c.workflow_id, 'params', c.params), 5
      from bitrix_sync.crm_commands c where c.workflow_id = any(v_workflows)
    union all
    select coalesce(c.completed_at, c.updated_at), 'command', 'outcome',
           jsonb_build_object('id', c.id, 'type', c.command_type, 'status', c.status, 'attempts', c.attempt_count,
                              'sent_at', c.sent_at, 'last_error_code', c.last_error_code,
                              'http_status', c.last_http_status, 'bitrix_error', c.last_bitrix_error,
                              'response', c.response), 5
      from bitrix_sync.crm_commands c where c.workflow_id = any(v_workflows) and c.status <> 'pending'
    union all
    -- Webhooks about the user's Contacts.
    select i.received_at, 'webhook', i.receiver::text,
           jsonb_build_object('id', i.id, 'contact_id', i.entity_id, 'status', i.status, 'outcome', i.outcome,
                              'processed_at', i.processed_at, 'coalesced_into', i.coalesced_into,
                              'last_error_code', i.last_error_code), 7
      from bitrix_sync.webhook_inbox i where i.receiver = 'contact' and i.entity_id = any(v_contacts)
    union all
    -- Business alerts (details are masked when raised).
    select a.first_occurred_at, 'alert', a.alert_type::text,
           jsonb_build_object('alert_number', a.alert_number, 'severity', a.severity, 'status', a.status,
                              'occurrences', a.occurrence_count, 'last_occurred_at', a.last_occurred_at,
                              'current_contact_id', a.current_contact_id, 'selected_contact_id', a.selected_contact_id,
                              'candidate_contact_ids', a.candidate_contact_ids, 'details', a.details,
                              'item_id', a.item_id, 'stage_id', a.stage_id, 'mirror', a.crm_sync_status), 8
      from bitrix_sync.business_alerts a where a.user_id = p_user_id
    union all
    select a.closed_at, 'alert', 'closed', jsonb_build_object('alert_number', a.alert_number, 'status', a.status), 8
      from bitrix_sync.business_alerts a where a.user_id = p_user_id and a.closed_at is not null
    union all
    -- Technical dead letters of the user's work.
    select d.created_at, 'dead_letter', d.operation::text,
           jsonb_build_object('id', d.id, 'source', d.source, 'error_code', d.error_code, 'http_status', d.http_status,
                              'bitrix_error', d.bitrix_error, 'resolved_at', d.resolved_at, 'resolution', d.resolution), 9
      from bitrix_sync.technical_dead_letters d where d.workflow_id = any(v_workflows)
    union all
    -- The links, as history.
    select m.opened_at, 'mapping', 'opened',
           jsonb_build_object('id', m.id, 'contact_id', m.external_id, 'workflow_id', m.workflow_id), 10
      from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id
    union all
    select m.closed_at, 'mapping', 'closed',
           jsonb_build_object('id', m.id, 'contact_id', m.external_id, 'status', m.status, 'reason', m.close_reason,
                              'workflow_id', m.workflow_id), 10
      from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id and m.closed_at is not null
    union all
    -- What bitrix-sync last saw or wrote of each Contact: hashes (their start), no values.
    select coalesce(s.last_applied_at, s.updated_at), 'snapshot', 'state',
           jsonb_build_object('contact_id', s.contact_id, 'registered', s.registered, 'crm_updated_at', s.crm_updated_at,
                              'last_applied_source', s.last_applied_source,
                              'last_webhook_received_at', s.last_webhook_received_at, 'stale', s.stale,
                              'stale_reason', s.stale_reason, 'citizenship_enum_id', s.citizenship_enum_id,
                              'name_hash', left(s.name_hash, 12), 'email_hash', left(s.email_hash, 12),
                              'phone_hash', left(s.phone_hash, 12)), 11
      from bitrix_sync.contact_snapshots s where s.contact_id = any(v_contacts)
    union all
    -- Rebinds, admin decisions on the user's workflows, drift and its repairs.
    select r.requested_at, 'rebind', r.status::text,
           jsonb_build_object('id', r.id, 'previous_contact_id', r.previous_contact_id,
                              'target_contact_id', r.target_contact_id, 'workflow_id', r.workflow_id,
                              'completed_at', r.completed_at), 12
      from bitrix_sync.rebind_requests r where r.user_id = p_user_id
    union all
    select a.performed_at, 'admin', a.action::text,
           jsonb_build_object('id', a.id, 'workflow_id', a.workflow_id, 'decision', a.decision,
                              'operator_id', a.operator_id, 'db_user', a.db_user), 13
      from bitrix_sync.admin_actions a where a.workflow_id = any(v_workflows)
    union all
    select f.detected_at, 'drift', f.kind::text,
           jsonb_build_object('contact_id', f.contact_id, 'details', f.details, 'last_seen_at', f.last_seen_at,
                              'repair_requested_at', f.repair_requested_at, 'repair_intent', f.repair_intent), 14
      from bitrix_sync.drift_findings f where f.user_id = p_user_id
    union all
    select r.requested_at, 'repair', r.intent::text,
           jsonb_build_object('id', r.id, 'kinds', r.kinds, 'contact_id', r.contact_id,
                              'requested_by', r.requested_by, 'db_user', r.db_user), 15
      from bitrix_sync.drift_repairs r where r.user_id = p_user_id
  ) e
  order by e.at nulls last, e.ord;
end $$;
comment on function bitrix_sync.explain_user(uuid) is
  'Admin: one user''s story in time order (source, event, safe detail): the App''s identity and profile (statuses; phone, name, e-mail and citizenship masked), intents recorded and queued, workflows with their steps and outcomes, CRM commands and their results (IDs, flags, hashes), Contact webhooks, business alerts, dead letters, the link history, snapshots (hash prefixes), rebinds, admin decisions, drift findings and repairs. BS060 for an id nobody knows.';

create or replace function bitrix_sync.diagnose_app_values(p_user_id uuid, p_salt text)
returns table (field text, masked text, digest text)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_salt is null or length(p_salt) < 16 then
    raise exception 'a salt of at least 16 characters is required'
      using errcode = 'BS004', hint = 'npm run diagnose draws a random one per run; digests are comparable only within that run.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id) then
    raise exception 'user % is not an App user', p_user_id
      using errcode = 'BS060', hint = 'Check the id (han_app.user_identity.id); explain_user() shows what bitrix-sync knows of ids the App no longer has.';
  end if;
  -- What the audit compares, normalised the same way (trimmed; empty is none), salted so that the
  -- digests mean nothing outside this call.
  return query
  select v.field, bitrix_sync._mask_pii(v.value),
         case when nullif(btrim(v.value), '') is null then null
              else encode(sha256(convert_to(p_salt || btrim(v.value), 'UTF8')), 'hex') end
    from han_app.user_identity u
    left join han_app.client_profile p on p.user_id = u.id
   cross join lateral (values ('phone', u.phone_number::text), ('full_name', p.full_name), ('email', p.email),
                              ('citizenship', p.citizenship)) v(field, value)
   where u.id = p_user_id;
end $$;
comment on function bitrix_sync.diagnose_app_values(uuid, text) is
  'Admin (npm run diagnose): the App''s phone, name, e-mail and citizenship of one user, masked, each with a SHA-256 digest salted with p_salt (at least 16 characters) so the script can say whether the live Contact holds the same value without the database handing it out. BS060 for a user the App does not have.';

------------------------------------------------------------------------------------------------
-- Metrics (sql/metrics.sql calls this from metrics_snapshot)
------------------------------------------------------------------------------------------------

create or replace function bitrix_sync.drift_metrics()
returns table (family text, labels jsonb, value double precision)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select 'bitrix_sync_drift_users', jsonb_build_object('kind', k.kind),
         (select count(*) from bitrix_sync.drift_findings f where f.kind = k.kind)::float8
    from unnest(array['contact_missing', 'crm_master_behind', 'inactive_user_linked', 'phone_missing',
                      'registered_inactive_user', 'registered_unknown_user', 'registered_wrong', 'unmapped_user',
                      'user_id_wrong']) k(kind)
  union all
  select m.family, '{}'::jsonb, m.value
    from bitrix_sync.audit_state s
   cross join lateral (values
     -- Until the first success: when the audit was installed, so a stopped audit is noticed.
     ('bitrix_sync_audit_last_success_timestamp_seconds', extract(epoch from coalesce(s.last_success_at, s.created_at))::float8),
     ('bitrix_sync_audit_running', case when s.last_run_status = 'running' then 1 else 0 end::float8),
     ('bitrix_sync_audit_enabled',
      case when (bitrix_sync._active_setting('audit.enabled') #>> '{}')::boolean and bitrix_sync.cutover_performed()
                and not bitrix_sync.sync_paused()
           then 1 else 0 end::float8),
     ('bitrix_sync_audit_interval_seconds', (bitrix_sync._active_setting('audit.interval_sec') #>> '{}')::float8),
     ('bitrix_sync_audit_links', coalesce(s.last_links, 0)::float8),
     ('bitrix_sync_audit_overdue_links', coalesce(s.last_overdue, 0)::float8),
     ('bitrix_sync_audit_progress_ratio',
      case when coalesce(s.last_links, 0) = 0 then 1 else 1 - s.last_overdue::float8 / s.last_links end)
   ) m(family, value)
   where s.singleton
$$;
comment on function bitrix_sync.drift_metrics() is
  'The convergence audit''s samples for GET /metrics (part of metrics_snapshot): open findings by kind (every kind, 0 included), the last success (the install time before the first), whether a run is running, whether the audit is enabled (setting, cutover, not paused), its interval, and from the last run the active links, those overdue and the share in time.';

-- Nothing of this is deleted by hand: the repairs are audit.
drop trigger if exists _200_forbid_delete on bitrix_sync.drift_repairs;
create trigger _200_forbid_delete before delete on bitrix_sync.drift_repairs
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.drift_repairs is 'The audit of drift repairs is never deleted.';

drop trigger if exists _900_set_updated_at on bitrix_sync.audit_state;
create trigger _900_set_updated_at before update on bitrix_sync.audit_state
  for each row execute function bitrix_sync.tg__set_updated_at();
comment on trigger _900_set_updated_at on bitrix_sync.audit_state is 'Stamps updated_at on every change.';

-- Privileges: sql/privileges.sql (the runtime runs the audit's functions; the admin reads the views
-- and calls repair_drift, explain_user, diagnose_app_values, request_convergence_audit).
