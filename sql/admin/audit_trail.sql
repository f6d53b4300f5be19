-- What the admin functions share (docs/admin.md): the audit every one of them writes in its own
-- transaction (who and why, bitrix_sync.admin_actions), and closing the CRM commands of a workflow
-- an admin cancels, so that nothing is sent for it afterwards.

create or replace function bitrix_sync._check_admin_audit(p_reason text, p_operator_id text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  if p_reason is null or length(btrim(p_reason)) not between 3 and 500
     or p_operator_id is null or length(btrim(p_operator_id)) not between 1 and 128 then
    raise exception 'a reason (3 to 500 characters) and an operator_id (1 to 128) are required for the audit'
      using errcode = 'BS004',
            hint = 'Say why, and who you are: e.g. ''duplicates merged in the CRM'', ''ops:ivanov''.';
  end if;
end $$;
comment on function bitrix_sync._check_admin_audit(text, text) is
  'Internal: refuses an admin call without a reason (3 to 500 characters) or an operator id (BS004).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._record_admin_action(
  p_action text, p_workflow_id uuid, p_rebind_request_id uuid, p_decision text, p_contact_id text,
  p_reason text, p_operator_id text
) returns bigint
language sql set search_path = pg_catalog, pg_temp as $$
  insert into bitrix_sync.admin_actions
    (action, workflow_id, rebind_request_id, decision, contact_id, reason, operator_id)
  values (p_action, p_workflow_id, p_rebind_request_id, p_decision, p_contact_id, btrim(p_reason),
          btrim(p_operator_id))
  returning id
$$;
comment on function bitrix_sync._record_admin_action(text, uuid, uuid, text, text, text, text) is
  'Internal: writes the audit row of an admin action (the database login is recorded by the column default).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._record_admin_action(text,uuid,uuid,text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._abandon_workflow_commands(p_workflow_id uuid, p_code text)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_count integer;
  v_more integer;
begin
  perform bitrix_sync._check_code(p_code);
  -- Not sent yet: pending and retry_wait are abandoned; a leased one too, and the pump's send marker
  -- (send_commands, which wants it leased) then skips it. The caller refuses a write in flight.
  update bitrix_sync.crm_commands c
     set status = 'dead_letter', completed_at = now(), last_error_code = p_code,
         lease_token = null, locked_by = null, locked_until = null
   where c.workflow_id = p_workflow_id and c.alert_id is null
     and c.status in ('pending', 'retry_wait', 'leased');
  get diagnostics v_count = row_count;
  -- A write whose outcome is unknown stays recorded as such in the request's outcome; the command
  -- itself is closed through reconcile, the only way out of uncertain (§7.2).
  update bitrix_sync.crm_commands c set status = 'reconcile'
   where c.workflow_id = p_workflow_id and c.alert_id is null and c.status = 'uncertain';
  update bitrix_sync.crm_commands c
     set status = 'dead_letter', completed_at = now(), last_error_code = p_code
   where c.workflow_id = p_workflow_id and c.alert_id is null and c.status = 'reconcile';
  get diagnostics v_more = row_count;
  return v_count + v_more;
end $$;
comment on function bitrix_sync._abandon_workflow_commands(uuid, text) is
  'Internal (admin cancel): closes the unsent (pending, retry_wait, leased) and the unresolved (uncertain, reconcile) commands of a workflow as dead_letter with the code; no DLQ row. Returns how many.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _200_forbid_delete on bitrix_sync.admin_actions;
create trigger _200_forbid_delete before delete on bitrix_sync.admin_actions
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.admin_actions is 'The admin audit is never deleted.';
