-- The canonical user <-> Contact mapping (§4, §6.3). Only these functions write it; history rows
-- are never deleted (trigger) and closed/broken rows are final (guard trigger).

create or replace function bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid)
returns bitrix_sync.entity_external_mapping
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
  v_since timestamptz;
begin
  insert into bitrix_sync.entity_external_mapping (entity_id, external_id, workflow_id)
  values (p_user_id, p_contact_id, p_workflow_id)
  returning * into v_row;
  -- A robot's call about this Contact that came while the link was being made was (or will be)
  -- answered "not ours" from a read of the mappings taken before this row commits: a manager's edit
  -- right after the create, or the portal's own workflow on create. One more read of the Contact
  -- after the link covers it: an event queued now, processed once this transaction commits (a
  -- pending event of the Contact coalesces with it). Matched: the Contact's events not yet processed
  -- (a claim may have read the mappings already), and those processed as unknown_mapping since the
  -- workflow began (before it, the workflow's own read of the Contact saw the edit). No lock: a
  -- processor that claims after this commit sees the link; one that claimed before is matched here.
  select coalesce(min(w.created_at), now() - interval '1 hour') into v_since
    from bitrix_sync.workflow_instances w where w.id = p_workflow_id;
  if exists (select 1 from bitrix_sync.webhook_inbox i
              where i.receiver = 'contact' and i.entity_id = p_contact_id
                and i.status in ('received', 'retry_wait', 'processing'))
     or exists (select 1 from bitrix_sync.webhook_inbox i
                 where i.outcome = 'unknown_mapping' and i.entity_id = p_contact_id
                   and i.receiver = 'contact' and i.received_at >= v_since) then
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    values ('contact', 'linked', 3, p_contact_id);
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
  return v_row;
exception
  when unique_violation then
    raise exception 'cannot link user to Contact %: the user or the Contact already has an active link', p_contact_id
      using errcode = 'BS006',
            hint = 'Close the existing active mapping first (close_mapping), or use request_bitrix_contact_rebind().';
end $$;
comment on function bitrix_sync.open_mapping(uuid, text, uuid) is
  'Creates the active link of a user to a Contact. Refuses a second active link for either side (BS006). Queues one more read of the Contact (webhook event linked) when a robot call about it is unprocessed or was answered unknown_mapping since the workflow began, so an edit made while the link was being made is not lost.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.close_mapping(
  p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean default false
) returns bitrix_sync.entity_external_mapping
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  perform bitrix_sync._check_code(p_reason);
  update bitrix_sync.entity_external_mapping
     set status = case when p_broken then 'broken' else 'closed' end,
         closed_at = now(), close_reason = p_reason, workflow_id = coalesce(p_workflow_id, workflow_id)
   where id = p_mapping_id and status = 'active'
  returning * into v_row;
  if not found then
    raise exception 'mapping % is not active', p_mapping_id
      using errcode = 'BS002', hint = 'closed and broken mappings are final; look up the current active row.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.close_mapping(uuid, text, uuid, boolean) is
  'active -> closed (or broken with p_broken) with a reason code and the workflow as correlation. The row stays as history.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.active_mapping_for_user(p_user_id uuid)
returns bitrix_sync.entity_external_mapping
language sql stable set search_path = pg_catalog, pg_temp as $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and entity_type = 'user' and entity_id = p_user_id and status = 'active'
$$;
comment on function bitrix_sync.active_mapping_for_user(uuid) is 'The user''s active Contact link, or null.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.active_mapping_for_contact(p_contact_id text)
returns bitrix_sync.entity_external_mapping
language sql stable set search_path = pg_catalog, pg_temp as $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and external_entity_type = 'contact' and external_id = p_contact_id
     and status = 'active'
$$;
comment on function bitrix_sync.active_mapping_for_contact(text) is 'The Contact''s active user link, or null.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
