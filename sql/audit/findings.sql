-- What a convergence audit run records (the runtime role, fenced by the run's lease): the links it
-- compared, and the scan of registered Contacts.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_audit_findings(uuid,timestamp with time zone,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.record_registered_contacts(
  p_lease_token uuid, p_read_at timestamptz, p_from_id bigint, p_to_id bigint, p_checked_ids bigint[],
  p_rows jsonb
) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set row_security = off as $$
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_registered_contacts(uuid,timestamp with time zone,bigint,bigint,bigint[],jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.advance_registered_scan(uuid,bigint,integer,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
