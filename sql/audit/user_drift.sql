-- The convergence audit's user kinds (unmapped_user, inactive_user_linked), judged in SQL over a
-- window of users per sampled run (every user in a full run).

create or replace function bitrix_sync.refresh_user_drift(p_lease_token uuid, p_read_at timestamptz)
returns integer
-- jit off: the window's query is costed above jit_above_cost from a few thousand users on, and
-- compiling it took 356 ms of a 400 ms run at 10 000 users (bench:scale).
language plpgsql security definer set search_path = pg_catalog, pg_temp set row_security = off set jit = off as $$
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.refresh_user_drift(uuid,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
