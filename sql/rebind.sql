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

create or replace function bitrix_sync._rebind_crm_outcome(p_workflow_id uuid) returns text
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- The rebind's writes: the target write sets this user (set_user self), the clear of the previous
  -- Contact removes it (set_user clear). Only writes that were sent count.
  with w as (
    select coalesce(bool_or(x.set_user = 'self'), false) as target_sent,
           coalesce(bool_or(x.set_user = 'self' and x.ok), false) as target_done,
           coalesce(bool_or(x.set_user = 'clear'), false) as clear_sent,
           coalesce(bool_or(x.set_user = 'clear' and x.ok), false) as clear_done
      from (select c.params ->> 'set_user' as set_user, c.status = 'succeeded' as ok
              from bitrix_sync.crm_commands c
             where c.workflow_id = p_workflow_id and c.alert_id is null
               and c.command_type = 'contact.update' and c.first_sent_at is not null) x
  )
  select case
           when not target_sent then 'crm_unchanged'
           when not target_done then 'target_write_unconfirmed'
           when not clear_sent then 'target_written'
           when not clear_done then 'target_written_clear_unconfirmed'
           else 'target_written_previous_cleared'
         end
    from w
$$;
comment on function bitrix_sync._rebind_crm_outcome(uuid) is
  'Internal: what a contact.rebind workflow that did not complete left in the CRM, from its commands: crm_unchanged (no write sent), target_write_unconfirmed (sent, never confirmed), target_written (the target carries the user, the previous Contact was not cleared), target_written_clear_unconfirmed, target_written_previous_cleared (both written, the link did not move).';

-- Closing a request is the trigger's job, from the row the UPDATE left: the function takes the
-- workflow's id, never a row (a caller could build one claiming any state and code), reads the
-- workflow itself under its lock and refuses one that has not finished. Nobody is granted it: the
-- trigger function, security definer, runs it as the owner.
create or replace function bitrix_sync._close_rebind_request(p_workflow_id uuid)
returns bitrix_sync.rebind_requests
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found or v_wf.workflow_type <> 'contact.rebind' then
    raise exception 'workflow % is not a contact.rebind workflow', p_workflow_id
      using errcode = 'BS005', hint = 'Only a rebind''s workflow has a request to close.';
  end if;
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    raise exception 'workflow % is %, not finished: its rebind request stays open', p_workflow_id, v_wf.state
      using errcode = 'BS002', hint = 'A request closes when its workflow reaches succeeded, failed or cancelled.';
  end if;
  -- A cancelled workflow cancels its request; any other end without complete_rebind fails it with
  -- the workflow's code (a refusal, a CRM error, the retry horizon of a command or of a step).
  update bitrix_sync.rebind_requests r
     set status = case when v_wf.state = 'cancelled' then 'cancelled' else 'failed' end,
         failure_code = case v_wf.state when 'cancelled' then null
                                        when 'failed' then coalesce(v_wf.last_error_code, 'rebind_not_completed')
                                        else 'rebind_not_completed' end,
         outcome = bitrix_sync._rebind_crm_outcome(v_wf.id),
         completed_at = now()
   where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync._close_rebind_request(uuid) is
  'Internal (the trigger _300_close_rebind_request): the still open request of a finished contact.rebind workflow, read by id under the row''s lock, becomes failed (failure_code = the workflow''s last_error_code) or cancelled, with the outcome it left in the CRM. BS005 for another kind of workflow, BS002 for one not finished. Returns null when the request was already finished. Granted to nobody.';

create or replace function bitrix_sync.tg_workflow_instances__close_rebind_request() returns trigger
-- Security definer: the runtime role's transitions fire it, and that role neither writes rebind
-- requests nor executes _close_rebind_request (docs/security.md).
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform bitrix_sync._close_rebind_request(new.id);
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__close_rebind_request() is
  'AFTER UPDATE OF state trigger (security definer): a contact.rebind workflow that reaches a final state closes its open request, so no failing path can leave it in_progress (which would refuse every later rebind of the user).';

drop trigger if exists _300_close_rebind_request on bitrix_sync.workflow_instances;
create trigger _300_close_rebind_request after update of state on bitrix_sync.workflow_instances
  for each row
  -- Written compactly (text arrays, not IN lists over varchar): PostgreSQL reads a trigger's WHEN
  -- from its stored form for every UPDATE statement on the table (docs/performance.md).
  when (new.workflow_type::text = 'contact.rebind' and new.state::text = any ('{succeeded,failed,cancelled}'::text[])
        and old.state::text <> all ('{succeeded,failed,cancelled}'::text[]))
  execute function bitrix_sync.tg_workflow_instances__close_rebind_request();
comment on trigger _300_close_rebind_request on bitrix_sync.workflow_instances is
  'Closes the rebind request of a contact.rebind workflow that finished without complete_rebind (§5.4, issue 11).';

