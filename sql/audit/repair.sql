-- Repair: the intents that bring drifted users back through the ordinary workflows (§5), audited.

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
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
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
    -- Wake a sync loop asleep on the intake watch, as the App's trigger does (sql/intake/app_trigger.sql,
    -- sql/intake/watch.sql): a loop asleep holds SHARE on the watch table, so this try fails exactly
    -- then; otherwise this transaction marks the table until it ends, and a loop about to fall
    -- asleep waits for it and looks at the queue once more. Callers are security definer (the
    -- owner may lock the table).
    begin
      lock table bitrix_sync.lock_intake_watch in row exclusive mode nowait;
    exception when lock_not_available then
      perform pg_notify('bitrix_sync_queue', 'drift_repair');
    end;
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._repair_drift(text,text,uuid[],text[],boolean,boolean,boolean)', array[]::text[], array[]::text[], array[]::text[],
   'Internal helper of repair_drift and auto_repair_drift.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.repair_drift(
  p_requested_by text, p_reason text, p_user_ids uuid[] default null, p_dry_run boolean default false
) returns table (user_id uuid, contact_id text, kinds text[], intent text, recorded boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp set row_security = off as $$
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.repair_drift(text,text,uuid[],boolean)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Records the intents that bring drifted users back (or, dry run, lists them); audited.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.auto_repair_drift(p_kinds text[]) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set row_security = off as $$
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.auto_repair_drift(text[])', array['EXECUTE'], array[]::text[], array[]::text[],
   'Convergence audit: the repair the setting audit.auto_repair_kinds switches on.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- Nothing of this is deleted by hand: the repairs are audit.
drop trigger if exists _200_forbid_delete on bitrix_sync.drift_repairs;
create trigger _200_forbid_delete before delete on bitrix_sync.drift_repairs
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.drift_repairs is 'The audit of drift repairs is never deleted.';
