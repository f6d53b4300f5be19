-- Rebind requests for the admin (§5.4, docs/admin.md "Rebind"): watch a request without reading
-- personal data, and cancel an open one with a reason. A cancel stops its workflow and records what
-- the CRM already holds in the request's outcome: the CRM is never left changed without a record.

create or replace view bitrix_sync.rebind_request_status as
select r.id as request_id, r.status, r.failure_code, r.outcome, r.operator_id, r.requested_at, r.completed_at,
       r.cancelled_by, w.id as workflow_id, w.state as workflow_state, w.current_step,
       w.last_error_code as workflow_error_code, w.held_intent_type,
       extract(epoch from coalesce(r.completed_at, now()) - r.requested_at)::bigint as age_sec,
       r.requested_db_user, r.cancelled_db_user
  from bitrix_sync.rebind_requests r
  left join bitrix_sync.workflow_instances w on w.id = r.workflow_id;
comment on view bitrix_sync.rebind_request_status is
  'Rebind requests as an admin watches them: status, failure code, what the CRM holds (outcome), who asked and who cancelled (the declared operator and the database login, session_user), and where the workflow is (state, step, error code, an App change held until it ends). No user or Contact IDs and no reason text.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.rebind_request_status', array[]::text[], array['SELECT'], array[]::text[],
   'Rebind requests as an admin follows them (docs/admin.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text)
returns table (request_id uuid, status text, outcome text, workflow_id uuid, workflow_state text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_req bitrix_sync.rebind_requests;
  v_wf bitrix_sync.workflow_instances;
  v_outcome text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_req from bitrix_sync.rebind_requests r where r.id = p_request_id for update;
  if not found then
    raise exception 'there is no rebind request %', p_request_id
      using errcode = 'BS005',
            hint = 'The id is what request_bitrix_contact_rebind returned; open ones: select * from bitrix_sync.rebind_request_status where status in (''requested'', ''in_progress'').';
  end if;
  if v_req.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is already %', p_request_id, v_req.status
      using errcode = 'BS002',
            hint = 'A finished request stays finished; its outcome column says what the CRM holds.';
  end if;
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = v_req.workflow_id for update;
  -- A write on its way to the portal has no known outcome yet: wait for its reply (or for its lease
  -- to expire, which records it as uncertain) so that the outcome recorded below is exact.
  perform 1 from bitrix_sync.crm_commands c
   where c.workflow_id = v_req.workflow_id and c.alert_id is null and c.status = 'in_flight'
     and bitrix_sync._is_write_command(c.command_type)
   for update;
  if found then
    raise exception 'a CRM write of rebind request % is on its way to the portal right now', p_request_id
      using errcode = 'BS007',
            hint = 'Try again in a few seconds: once its reply (or its lease expiry) is recorded, the cancel records exactly what the CRM holds.';
  end if;

  perform bitrix_sync._abandon_workflow_commands(v_req.workflow_id, 'rebind_cancelled');
  v_outcome := bitrix_sync._rebind_crm_outcome(v_req.workflow_id);
  update bitrix_sync.rebind_requests r
     set status = 'cancelled', outcome = v_outcome, cancel_reason = btrim(p_reason),
         cancelled_by = btrim(p_operator_id), cancelled_db_user = session_user, completed_at = now()
   where r.id = p_request_id
  returning * into v_req;
  -- The workflow stops here, whoever holds its lease: a step still running is refused at its next
  -- fenced call (BS001). An App change held during the rebind starts now, on the old link.
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    update bitrix_sync.workflow_instances w
       set state = 'cancelled', outcome = 'rebind_cancelled', lease_token = null, locked_by = null,
           locked_until = null, finished_at = now()
     where w.id = v_wf.id
    returning * into v_wf;
  end if;
  perform bitrix_sync._record_admin_action('cancel_rebind_request', v_wf.id, p_request_id, null, null,
                                           p_reason, p_operator_id);
  if v_outcome <> 'crm_unchanged' then
    raise notice 'the CRM was already changed: %', v_outcome
      using hint = 'docs/admin.md (Rebind, outcomes) says what each outcome leaves in the CRM and what to check there.';
  end if;
  return query select v_req.id, v_req.status::text, v_req.outcome::text, v_wf.id, v_wf.state::text;
end $$;
comment on function bitrix_sync.cancel_rebind_request(uuid, text, text) is
  'Admin (docs/admin.md): requested | in_progress -> cancelled with the operator''s reason, audited. Closes the workflow''s unsent and unresolved commands, cancels the workflow (a held App change then starts) and records in outcome what the CRM already holds. BS004 missing audit field, BS005 unknown request, BS002 already finished, BS007 a write is in flight right now.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.cancel_rebind_request(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind: cancel an open request (docs/admin.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
