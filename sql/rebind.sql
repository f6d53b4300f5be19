-- Audited rebind request (§5.4): an admin asks to move a user's link to another Contact. The
-- procedure records the request and starts a contact.rebind workflow; the mapping itself changes
-- only when the workflow has updated both Contacts. The runtime role only reads rebind requests:
-- the functions a rebind workflow calls under its lease are security definer, so the audit columns
-- (reason, operator) are out of its reach.

create or replace function bitrix_sync.request_bitrix_contact_rebind(
  user_id uuid, target_b24_id text, reason text, operator_id text
) returns uuid
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_current bitrix_sync.entity_external_mapping;
  v_request_id uuid;
  v_workflow_id uuid;
  v_user_id constant uuid := request_bitrix_contact_rebind.user_id;
  v_target constant text := btrim(request_bitrix_contact_rebind.target_b24_id);
begin
  if v_user_id is null or v_target is null or v_target !~ '^[1-9][0-9]{0,17}$' then
    raise exception 'target_b24_id must be a Bitrix24 Contact ID (digits only) and user_id is required'
      using errcode = 'BS004', hint = 'Example: select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''12345'', ''duplicate merged by CRM team'', ''ops:ivanov'');';
  end if;
  if reason is null or length(btrim(reason)) < 3 or operator_id is null or length(btrim(operator_id)) = 0 then
    raise exception 'a reason (3 to 500 characters) and an operator_id are required for the audit'
      using errcode = 'BS004', hint = 'Say why the link is wrong and who you are.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = v_user_id and u.record_status = 'active') then
    raise exception 'user % does not exist or is not active', v_user_id
      using errcode = 'BS005', hint = 'Only active users are linked to Contacts.';
  end if;

  -- 1. lock the user's current active mapping (there may be none).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_user_id and m.status = 'active'
   for update;
  if found and v_current.external_id = v_target then
    raise exception 'user % is already linked to Contact %', v_user_id, v_target
      using errcode = 'BS006', hint = 'Nothing to do.';
  end if;
  -- 2. the target must not be actively linked to another user.
  perform 1 from bitrix_sync.entity_external_mapping m
   where m.external_entity_type = 'contact' and m.external_id = v_target and m.status = 'active'
   for update;
  if found then
    raise exception 'Contact % is actively linked to another user', v_target
      using errcode = 'BS006',
            hint = 'Resolve that user''s link first (deactivate or rebind it); a Contact cannot serve two active users.';
  end if;
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.user_id = v_user_id and r.status in ('requested', 'in_progress')) then
    raise exception 'a rebind of user % is already in progress', v_user_id
      using errcode = 'BS007', hint = 'Wait for it to finish (bitrix_sync.status views), then ask again.';
  end if;
  -- Two open requests for one target would race for the same Contact; the second would fail late,
  -- after both Contacts were read and written.
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.target_contact_id = v_target and r.status in ('requested', 'in_progress')) then
    raise exception 'Contact % is already the target of an open rebind request', v_target
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end if;
  if exists (select 1 from bitrix_sync.workflow_instances w
              where w.user_id = v_user_id and w.state not in ('succeeded', 'failed', 'cancelled')) then
    raise exception 'user % has a sync workflow running', v_user_id
      using errcode = 'BS007', hint = 'Retry when it has finished; a user has one workflow at a time.';
  end if;

  -- 3. the request and its workflow; the mapping is untouched (4).
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, contact_id, step_data)
  values ('contact.rebind', 'contact.rebind', v_user_id, v_target,
          jsonb_build_object('previous_contact_id', v_current.external_id, 'target_contact_id', v_target))
  returning id into v_workflow_id;
  begin
    insert into bitrix_sync.rebind_requests (user_id, previous_contact_id, target_contact_id, reason, operator_id, workflow_id)
    values (v_user_id, v_current.external_id, v_target, btrim(reason), btrim(operator_id), v_workflow_id)
    returning id into v_request_id;
  exception when unique_violation then
    -- A concurrent request for the same target (or user) committed between the checks and here.
    raise exception 'Contact % or user % already has an open rebind request', v_target, v_user_id
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end;
  perform pg_notify('bitrix_sync_workflows', '');
  return v_request_id;
end $$;
comment on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) is
  'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user or already the target of an open request (BS009), records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';

create or replace function bitrix_sync._rebind_request_of(p_workflow_id uuid) returns bitrix_sync.rebind_requests
language plpgsql as $$
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

create or replace function bitrix_sync.fail_rebind_request(p_workflow_id uuid, p_lease_token uuid, p_failure_code text)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._check_code(p_failure_code);
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is %, it cannot fail', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished.';
  end if;
  update bitrix_sync.rebind_requests
     set status = 'failed', failure_code = p_failure_code, completed_at = now()
   where id = v_row.id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.fail_rebind_request(uuid, uuid, text) is
  'requested | in_progress -> failed with a safe failure code (target bound to another user, not found, CRM failure, user not eligible). The mapping is untouched. Fenced by the workflow''s lease token (BS001). Security definer, as start_rebind_request.';

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
  update bitrix_sync.rebind_requests set status = 'succeeded', completed_at = now()
   where id = v_row.id
  returning * into v_row;
  perform bitrix_sync._resolve_conflict_alerts(v_wf.user_id);
  return v_row;
end $$;
comment on function bitrix_sync.complete_rebind(uuid, uuid) is
  'in_progress -> succeeded for the request of a contact.rebind workflow, in one call: closes the user''s active mapping (rebound), opens the link to the target Contact, and resolves the user''s open conflict alerts. Fenced by the workflow''s lease token (BS001); BS006 if the target is linked meanwhile. Security definer, as start_rebind_request.';
