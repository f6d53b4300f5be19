-- The contact.rebind workflow (§5.4). The runtime role only reads rebind requests: the functions a
-- rebind workflow calls under its lease are security definer, so the audit columns (reason,
-- operator) are out of its reach.

create or replace function bitrix_sync._rebind_request_of(p_workflow_id uuid) returns bitrix_sync.rebind_requests
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_row from bitrix_sync.rebind_requests where workflow_id = p_workflow_id for update;
  if not found then
    raise exception 'workflow % has no rebind request', p_workflow_id
      using errcode = 'BS005', hint = 'A contact.rebind workflow is started only by request_bitrix_contact_rebind().';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._rebind_request_of(uuid) is
  'Internal: the rebind request a contact.rebind workflow serves, locked; BS005 when there is none.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._rebind_request_of(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the rebind workflow functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status = 'in_progress' then
    -- The workflow began this pass again (a Contact vanished mid-way): already started.
    return v_row;
  end if;
  if v_row.status <> 'requested' then
    raise exception 'rebind request % is %, it cannot start', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished; ask again with request_bitrix_contact_rebind().';
  end if;
  update bitrix_sync.rebind_requests set status = 'in_progress' where id = v_row.id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.start_rebind_request(uuid, uuid) is
  'requested -> in_progress when the contact.rebind workflow starts reading the Contacts (a request already in progress is returned as it is). Fenced by the workflow''s lease token (BS001). Security definer: the runtime role only reads rebind requests.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.start_rebind_request(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
  v_current bitrix_sync.entity_external_mapping;
begin
  v_wf := bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status <> 'in_progress' then
    raise exception 'rebind request % is %, not in_progress', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'start_rebind_request() first; a finished request stays finished.';
  end if;
  -- Both Contacts are updated: the link moves, the request ends and the conflicts that led to it are
  -- resolved in one transaction (§5.4, §11).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_wf.user_id and m.status = 'active'
   for update;
  if found then
    perform bitrix_sync.close_mapping(v_current.id, 'rebound', p_workflow_id);
  end if;
  perform bitrix_sync.open_mapping(v_wf.user_id, v_row.target_contact_id, p_workflow_id);
  update bitrix_sync.rebind_requests set status = 'succeeded', outcome = 'rebound', completed_at = now()
   where id = v_row.id
  returning * into v_row;
  -- Step 6: the alerts are resolved only here, after the link moved, in the same transaction.
  perform bitrix_sync._resolve_conflict_alerts(v_wf.user_id);
  return v_row;
end $$;
comment on function bitrix_sync.complete_rebind(uuid, uuid) is
  'in_progress -> succeeded (outcome rebound) for the request of a contact.rebind workflow, in one call: closes the user''s active mapping (rebound), opens the link to the target Contact, and then resolves the user''s open conflict alerts. Fenced by the workflow''s lease token (BS001); BS006 if the target is linked meanwhile. Security definer, as start_rebind_request.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.complete_rebind(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
