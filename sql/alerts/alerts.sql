-- Business alerts (§11): one open alert per (type, fingerprint); a repeat bumps occurrence_count;
-- after a terminal stage a new case opens a new alert linked to the previous one.

create or replace function bitrix_sync.raise_business_alert(
  p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid,
  p_current_contact_id text default null, p_selected_contact_id text default null,
  p_candidate_contact_ids jsonb default '[]'::jsonb, p_details jsonb default '{}'::jsonb,
  p_correlation_id uuid default null
) returns bitrix_sync.business_alerts
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.business_alerts;
  v_previous bigint;
begin
  perform bitrix_sync._check_code(p_alert_type);
  update bitrix_sync.business_alerts a
     set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(),
         current_contact_id = coalesce(p_current_contact_id, a.current_contact_id),
         selected_contact_id = coalesce(p_selected_contact_id, a.selected_contact_id),
         candidate_contact_ids = coalesce(p_candidate_contact_ids, a.candidate_contact_ids),
         details = coalesce(p_details, a.details),
         correlation_id = coalesce(p_correlation_id, a.correlation_id),
         crm_sync_status = 'pending'
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select max(a.id) into v_previous from bitrix_sync.business_alerts a
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint;
  insert into bitrix_sync.business_alerts
    (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id,
     candidate_contact_ids, details, previous_alert_id, correlation_id)
  values (p_alert_type, p_severity, p_fingerprint, p_user_id, p_current_contact_id, p_selected_contact_id,
          coalesce(p_candidate_contact_ids, '[]'::jsonb), coalesce(p_details, '{}'::jsonb), v_previous, p_correlation_id)
  returning * into v_row;
  return v_row;
exception
  when unique_violation then
    -- A concurrent raise opened it first: count this occurrence on that row.
    update bitrix_sync.business_alerts a
       set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(), crm_sync_status = 'pending'
     where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
    returning * into v_row;
    return v_row;
end $$;
comment on function bitrix_sync.raise_business_alert(text, text, text, uuid, text, text, jsonb, jsonb, uuid) is
  'Opens a business alert or, if one is open for (type, fingerprint), counts another occurrence on it. A new case after a closed one links previous_alert_id. details must already be masked.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.raise_business_alert(text,text,text,uuid,text,text,jsonb,jsonb,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text)
returns bitrix_sync.business_alerts
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts
     set item_id = coalesce(p_item_id, item_id), stage_id = coalesce(p_stage_id, stage_id)
   where id = p_alert_id
  returning * into v_row;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.record_alert_item(bigint, bigint, text) is
  'Records the smart-process item and stage after a successful add/update/get. crm_sync_status is left alone: a newer occurrence may already have set it back to pending.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_alert_item(bigint,bigint,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text default null)
returns bitrix_sync.business_alerts
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  if p_status not in ('resolved', 'closed', 'remote_missing') then
    raise exception 'an alert finishes as resolved, closed or remote_missing, not %', p_status
      using errcode = 'BS004', hint = 'See §11 and §10.3.';
  end if;
  update bitrix_sync.business_alerts
     set status = p_status, stage_id = coalesce(p_stage_id, stage_id), closed_at = now()
   where id = p_alert_id and status = 'open'
  returning * into v_row;
  if not found then
    raise exception 'business alert % is not open', p_alert_id
      using errcode = 'BS002', hint = 'A finished alert stays finished; a new case opens a new alert.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_business_alert(bigint, text, text) is
  'open -> resolved | closed (terminal stage seen) | remote_missing (item deleted in the CRM).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.finish_business_alert(bigint,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.mark_alert_mirrored(p_alert_id bigint)
returns bitrix_sync.business_alerts
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts set crm_sync_status = 'synced'
   where id = p_alert_id and crm_sync_status = 'pending'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from bitrix_sync.business_alerts where id = p_alert_id;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  raise exception 'business alert % is %, not pending: nothing to mirror', p_alert_id, v_row.crm_sync_status
    using errcode = 'BS002', hint = 'Only an alert whose change is pending is handed to the CRM; issue its command first.';
end $$;
comment on function bitrix_sync.mark_alert_mirrored(bigint) is
  'crm_sync_status pending -> synced once the alert''s add/update command is issued. A newer occurrence sets it back to pending. Refuses an alert that is not pending (BS002).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.mark_alert_mirrored(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.mark_alert_mirror_failed(p_alert_id bigint)
returns bitrix_sync.business_alerts
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  -- Only a mirror in progress can fail. A pending alert has a newer change still to send, whose
  -- command supersedes the one that failed, so it stays pending.
  update bitrix_sync.business_alerts set crm_sync_status = 'failed'
   where id = p_alert_id and crm_sync_status = 'synced'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from bitrix_sync.business_alerts where id = p_alert_id;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.mark_alert_mirror_failed(bigint) is
  'crm_sync_status synced -> failed when the alert''s command failed for good (visible in status). A pending alert keeps its newer change queued; a failed one stays failed.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.mark_alert_mirror_failed(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._resolve_conflict_alerts(p_user_id uuid) returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_count integer;
begin
  update bitrix_sync.business_alerts
     set status = 'resolved', closed_at = now(), crm_sync_status = 'pending'
   where user_id = p_user_id and status = 'open'
     and alert_type in ('contact_bound_to_other_user', 'duplicate_contacts', 'user_id_mismatch', 'contact_not_found');
  get diagnostics v_count = row_count;
  return v_count;
end $$;
comment on function bitrix_sync._resolve_conflict_alerts(uuid) is
  'Internal (complete_rebind): open -> resolved for the user''s link conflicts (bound to another user, duplicates, user_id mismatch, Contact not found); the smart-process items are updated again (crm_sync_status pending). Returns how many.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._resolve_conflict_alerts(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of complete_rebind.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
