-- Audited rebind request (§5.4): an admin asks to move a user's link to another Contact. The
-- procedure records the request and starts a contact.rebind workflow; the mapping itself changes
-- only when the workflow has updated both Contacts (sql/rebind/workflow.sql).

create or replace function bitrix_sync.request_bitrix_contact_rebind(
  user_id uuid, target_b24_id text, reason text, operator_id text
) returns uuid
language plpgsql security definer set search_path = pg_catalog, pg_temp set row_security = off as $$
declare
  v_current bitrix_sync.entity_external_mapping;
  v_open bitrix_sync.rebind_requests;
  v_busy bitrix_sync.workflow_instances;
  v_request_id uuid;
  v_workflow_id uuid;
  v_user_id constant uuid := request_bitrix_contact_rebind.user_id;
  v_target constant text := btrim(request_bitrix_contact_rebind.target_b24_id);
begin
  -- Messages name no user or Contact (the server log keeps them): the caller knows which it asked for.
  if v_user_id is null or v_target is null or v_target !~ '^[1-9][0-9]{0,17}$' then
    raise exception 'target_b24_id must be a Bitrix24 Contact ID (digits only) and user_id is required'
      using errcode = 'BS004', hint = 'Example: select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''12345'', ''duplicate merged by CRM team'', ''ops:ivanov'');';
  end if;
  if reason is null or length(btrim(reason)) < 3 or length(btrim(reason)) > 500
     or operator_id is null or length(btrim(operator_id)) = 0 then
    raise exception 'a reason (3 to 500 characters) and an operator_id are required for the audit'
      using errcode = 'BS004', hint = 'Say why the link is wrong and who you are.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = v_user_id and u.record_status = 'active') then
    raise exception 'this user does not exist or is not active'
      using errcode = 'BS005', hint = 'Only active users are linked to Contacts; check the user id.';
  end if;

  -- 1. lock the user's current active mapping (there may be none).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_user_id and m.status = 'active'
   for update;
  if found and v_current.external_id = v_target then
    raise exception 'this user is already linked to this Contact'
      using errcode = 'BS006', hint = 'Nothing to do.';
  end if;
  -- 2. the target must not be actively linked to another user.
  perform 1 from bitrix_sync.entity_external_mapping m
   where m.external_entity_type = 'contact' and m.external_id = v_target and m.status = 'active'
   for update;
  if found then
    raise exception 'the target Contact is actively linked to another user'
      using errcode = 'BS006',
            hint = 'Resolve that user''s link first (deactivate or rebind it); a Contact cannot serve two active users.';
  end if;
  select * into v_open from bitrix_sync.rebind_requests r
   where r.user_id = v_user_id and r.status in ('requested', 'in_progress');
  if found then
    raise exception 'a rebind of this user is already open (request %)', v_open.id
      using errcode = 'BS007',
            hint = format('Watch it with select * from bitrix_sync.rebind_request_status where request_id = %L; '
                          'or cancel it with select * from bitrix_sync.cancel_rebind_request(%L, ''<why>'', ''ops:<you>''); '
                          'then ask again.', v_open.id, v_open.id);
  end if;
  -- Two open requests for one target would race for the same Contact; the second would fail late,
  -- after both Contacts were read and written.
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.target_contact_id = v_target and r.status in ('requested', 'in_progress')) then
    raise exception 'Contact % is already the target of an open rebind request', v_target
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end if;
  select * into v_busy from bitrix_sync.workflow_instances w
   where w.user_id = v_user_id and w.state not in ('succeeded', 'failed', 'cancelled');
  if found and v_busy.state = 'waiting_manual' then
    raise exception 'this user has a workflow parked for a person (workflow %, reason %)', v_busy.id, v_busy.last_error_code
      using errcode = 'BS007',
            hint = format('Decide it first: select * from bitrix_sync.resume_parked_workflow(%L, ''retry'', ''<why>'', ''ops:<you>''); '
                          'or cancel it with select * from bitrix_sync.cancel_parked_workflow(%L, ''<why>'', ''ops:<you>''); '
                          'then ask again (docs/admin.md, Parked workflows).', v_busy.id, v_busy.id);
  elsif found then
    raise exception 'this user has a % workflow in progress (workflow %, state %)', v_busy.workflow_type, v_busy.id, v_busy.state
      using errcode = 'BS007',
            hint = 'It finishes on its own, usually within seconds (a CRM outage can make it wait); ask again then. A user has one workflow at a time.';
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
  'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user or already the target of an open request (BS009), and refuses while the user has an open request or a workflow (a parked one is named with how to clear it); records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind (§5.4).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
