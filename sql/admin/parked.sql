-- Parked workflows (§9, docs/admin.md "Parked workflows"): a workflow in waiting_manual waits for a
-- person. The admin lists them with their reason, resumes one with a decision where the reason needs
-- one, or cancels it; every call is audited (sql/admin/audit_trail.sql) and every refusal says what to do.

create or replace function bitrix_sync._parked_decisions(p_reason text) returns text[]
language sql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
  -- Too many candidates (the portal's answer may miss the newest), or a person's link that could not
  -- be made: a person picks the Contact or asks for a new one. Anything else is retried once the
  -- data is fixed (the App's phone, the CRM's citizenship list, the duplicates merged in the CRM).
  select case when p_reason in ('too_many_candidates', 'manual_link_not_found', 'manual_link_bound_to_other_user')
              then array['retry', 'link_contact', 'create_contact']
              else array['retry'] end
$$;
comment on function bitrix_sync._parked_decisions(text) is
  'The decisions resume_parked_workflow accepts for a parking reason: retry always; link_contact and create_contact for too_many_candidates and a refused manual link.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._parked_decisions(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The decisions a parked reason admits; called by the parked_workflows view with the reader''s rights.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.parked_workflows as
select w.id as workflow_id, w.workflow_type, w.last_error_code as reason,
       w.updated_at as parked_at, extract(epoch from now() - w.updated_at)::bigint as parked_for_sec,
       a.alert_number, a.alert_type,
       bitrix_sync._parked_decisions(w.last_error_code) as decisions
  from bitrix_sync.workflow_instances w
  left join lateral (
    select b.alert_number, b.alert_type from bitrix_sync.business_alerts b
     where b.correlation_id = w.correlation_id and b.status = 'open'
     order by b.id desc limit 1
  ) a on true
 where w.state = 'waiting_manual';
comment on view bitrix_sync.parked_workflows is
  'Workflows parked in waiting_manual for a person: the reason code, since when, the open business alert raised with it (alert_number as shown in the smart-process item) and the decisions resume_parked_workflow accepts. No user or Contact IDs: the alert item in the CRM has the details.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.parked_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Workflows waiting for a person, with their reason and the decisions that apply (docs/admin.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.resume_parked_workflow(
  p_workflow_id uuid, p_decision text, p_reason text, p_operator_id text, p_contact_id text default null
) returns table (workflow_id uuid, state text, decision text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_wf bitrix_sync.workflow_instances;
  v_allowed text[];
  v_contact text := nullif(btrim(p_contact_id), '');
  v_manual jsonb;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  if p_decision is null or p_decision not in ('retry', 'link_contact', 'create_contact') then
    raise exception 'the decision must be retry, link_contact or create_contact'
      using errcode = 'BS004',
            hint = 'select decisions from bitrix_sync.parked_workflows where workflow_id = ''<id>'' lists the ones this workflow accepts.';
  end if;
  if p_decision = 'link_contact' and (v_contact is null or v_contact !~ '^[1-9][0-9]{0,17}$') then
    raise exception 'link_contact needs the Contact ID to link (digits only)'
      using errcode = 'BS004',
            hint = 'Pass it last: resume_parked_workflow(''<workflow id>'', ''link_contact'', ''<why>'', ''ops:<you>'', ''12345'').';
  end if;
  if p_decision <> 'link_contact' and v_contact is not null then
    raise exception 'only link_contact takes a Contact ID'
      using errcode = 'BS004', hint = 'Leave p_contact_id out for retry and create_contact.';
  end if;

  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found then
    raise exception 'there is no workflow %', p_workflow_id
      using errcode = 'BS005', hint = 'Copy the id from select * from bitrix_sync.parked_workflows.';
  end if;
  if v_wf.state <> 'waiting_manual' then
    raise exception 'workflow % is %, not parked', p_workflow_id, v_wf.state
      using errcode = 'BS002',
            hint = 'Only a workflow in waiting_manual waits for a decision; it may have been resumed by a newer App change already. select * from bitrix_sync.parked_workflows lists the parked ones.';
  end if;
  v_allowed := bitrix_sync._parked_decisions(v_wf.last_error_code);
  if not (p_decision = any (v_allowed)) then
    raise exception 'decision % does not apply to a workflow parked for %', p_decision, v_wf.last_error_code
      using errcode = 'BS004',
            hint = format('For %s use %s. Fix the data first (docs/admin.md, Parked workflows), then retry.',
                          v_wf.last_error_code, array_to_string(v_allowed, ' or '));
  end if;
  if p_decision = 'link_contact' and exists (
       select 1 from bitrix_sync.entity_external_mapping m
        where m.external_entity_type = 'contact' and m.external_id = v_contact and m.status = 'active'
          and m.entity_id <> v_wf.user_id) then
    raise exception 'that Contact is actively linked to another user'
      using errcode = 'BS006',
            hint = 'Pick another Contact, or create_contact; a Contact serves one active user. Resolve the other user''s link first if this Contact is really this user''s.';
  end if;

  -- A new pass of the workflow's intent, from its first step, with the person's decision in its step
  -- data (src/workflows/step/map-or-create.ts reads step_data.manual).
  v_manual := case p_decision when 'retry' then null
                              else jsonb_strip_nulls(jsonb_build_object('decision', p_decision, 'contact_id', v_contact)) end;
  v_wf := bitrix_sync.fire_workflow_event(
            p_workflow_id, null, 'manual_resume',
            jsonb_build_object(
              'current_step', 'start',
              'next_attempt_at', now(),
              'step_data', jsonb_strip_nulls(jsonb_build_object('pass', v_wf.revision, 'as', v_wf.intent_type,
                                                                'manual', v_manual))));
  perform bitrix_sync._record_admin_action('resume_workflow', p_workflow_id, null, p_decision, v_contact,
                                           p_reason, p_operator_id);
  return query select v_wf.id, v_wf.state::text, p_decision;
end $$;
comment on function bitrix_sync.resume_parked_workflow(uuid, text, text, text, text) is
  'Admin (docs/admin.md): waiting_manual -> running (manual_resume) for a new pass of the workflow, with a decision: retry (the data was fixed), link_contact (with p_contact_id: link this Contact) or create_contact (too_many_candidates and refused manual links). Audited. BS004 for a missing audit field or a decision that does not apply, BS005 unknown workflow, BS002 not parked, BS006 the Contact is linked to another active user.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.resume_parked_workflow(uuid,text,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: resume with a decision.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.cancel_parked_workflow(p_workflow_id uuid, p_reason text, p_operator_id text)
returns table (workflow_id uuid, state text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_wf bitrix_sync.workflow_instances;
  v_request uuid;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found then
    raise exception 'there is no workflow %', p_workflow_id
      using errcode = 'BS005', hint = 'Copy the id from select * from bitrix_sync.parked_workflows.';
  end if;
  if v_wf.workflow_type = 'contact.rebind' then
    select r.id into v_request from bitrix_sync.rebind_requests r where r.workflow_id = p_workflow_id;
    raise exception 'workflow % carries a rebind request', p_workflow_id
      using errcode = 'BS004',
            hint = format('Cancel the request instead, which records what the CRM holds: select * from bitrix_sync.cancel_rebind_request(%L, ''<why>'', ''ops:<you>'');', v_request);
  end if;
  if v_wf.state <> 'waiting_manual' then
    raise exception 'workflow % is %, not parked', p_workflow_id, v_wf.state
      using errcode = 'BS002',
            hint = 'Only a workflow in waiting_manual is cancelled here; a running one finishes on its own. select * from bitrix_sync.parked_workflows lists the parked ones.';
  end if;
  perform bitrix_sync._abandon_workflow_commands(p_workflow_id, 'cancelled_by_admin');
  -- The reason it parked stays in last_error_code; the outcome says a person ended it.
  v_wf := bitrix_sync.fire_workflow_event(p_workflow_id, null, 'cancel',
                                          jsonb_build_object('outcome', 'cancelled_by_admin'));
  perform bitrix_sync._record_admin_action('cancel_workflow', p_workflow_id, null, null, null, p_reason, p_operator_id);
  return query select v_wf.id, v_wf.state::text;
end $$;
comment on function bitrix_sync.cancel_parked_workflow(uuid, text, text) is
  'Admin (docs/admin.md): waiting_manual -> cancelled (outcome cancelled_by_admin), audited. The user''s next App change starts a new workflow. BS004 missing audit field or a rebind''s workflow (cancel_rebind_request), BS005 unknown workflow, BS002 not parked.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.cancel_parked_workflow(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: cancel with a reason.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
