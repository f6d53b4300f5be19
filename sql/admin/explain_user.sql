-- One user's story in time order, for an admin (docs/admin.md, "Drift and its repair"): what the
-- App, the queue, the workflows, the commands, the webhooks, the alerts, the links, the snapshots,
-- the rebinds and the convergence audit hold about the user; personal values masked (§15).

create or replace function bitrix_sync.explain_user(p_user_id uuid)
returns table (at timestamptz, source text, event text, detail jsonb)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_contacts text[];
  v_workflows uuid[];
begin
  if p_user_id is null then
    raise exception 'explain_user needs a user id'
      using errcode = 'BS004', hint = 'Pass the App user''s UUID (han_app.user_identity.id), e.g. from bitrix_sync.status_drift.';
  end if;
  select array_agg(distinct c) into v_contacts
    from (select m.external_id::text as c from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id
          union select s.contact_id from bitrix_sync.contact_snapshots s where s.user_id = p_user_id
          union select f.contact_id from bitrix_sync.drift_findings f where f.user_id = p_user_id and f.contact_id is not null) x;
  select array_agg(w.id) into v_workflows from bitrix_sync.workflow_instances w where w.user_id = p_user_id;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id)
     and v_contacts is null and v_workflows is null
     and not exists (select 1 from han_app.sync_queue q where q.entity_id = p_user_id)
     and not exists (select 1 from han_app.sync_queue_journal j where j.user_id = p_user_id)
     and not exists (select 1 from bitrix_sync.business_alerts a where a.user_id = p_user_id)
     and not exists (select 1 from bitrix_sync.drift_repairs r where r.user_id = p_user_id) then
    raise exception 'user % is known neither to the App nor to bitrix-sync', p_user_id
      using errcode = 'BS060',
            hint = 'Check the id: it is han_app.user_identity.id (status_drift, parked_workflows and rebind_request_status show it).';
  end if;
  v_contacts := coalesce(v_contacts, '{}');
  v_workflows := coalesce(v_workflows, '{}');

  return query
  select e.at, e.source, e.event, e.detail from (
    -- The App's own rows: statuses, times, and personal values masked (§15).
    select u.created_at as at, 'app'::text as source, 'identity_created'::text as event,
           jsonb_build_object('status', u.record_status, 'phone', bitrix_sync._mask_pii(u.phone_number)) as detail, 1 as ord
      from han_app.user_identity u where u.id = p_user_id
    union all
    select u.updated_at, 'app', 'identity_now',
           jsonb_build_object('status', u.record_status, 'phone', bitrix_sync._mask_pii(u.phone_number)), 2
      from han_app.user_identity u where u.id = p_user_id and u.updated_at > u.created_at
    union all
    select p.created_at, 'app', 'profile_created', jsonb_build_object('status', p.record_status), 1
      from han_app.client_profile p where p.user_id = p_user_id
    union all
    select greatest(p.updated_at, p.created_at), 'app', 'profile_now',
           jsonb_build_object('status', p.record_status, 'full_name', bitrix_sync._mask_pii(p.full_name),
                              'email', bitrix_sync._mask_pii(p.email), 'citizenship', bitrix_sync._mask_pii(p.citizenship),
                              'source_updated_at', p.source_updated_at), 2
      from han_app.client_profile p where p.user_id = p_user_id
    union all
    -- Intents: recorded (not folded yet), and queued.
    select j.recorded_at, 'intent', j.task_type,
           jsonb_build_object('status', 'recorded', 'reason', j.reason), 3
      from han_app.sync_queue_journal j where j.user_id = p_user_id
    union all
    select q.created_at, 'intent', q.task_type::text,
           jsonb_build_object('id', q.id, 'status', q.status, 'reason', q.payload_json ->> 'reason',
                              'attempts', q.attempt_count, 'completed_at', q.completed_at,
                              'cancel_reason', q.cancel_reason, 'last_error_code', q.last_error_code), 3
      from han_app.sync_queue q where q.entity_type = 'user' and q.entity_id = p_user_id
    union all
    -- Workflows and their steps.
    select w.created_at, 'workflow', 'started',
           jsonb_build_object('id', w.id, 'type', w.workflow_type, 'intent', w.intent_type, 'correlation_id', w.correlation_id), 4
      from bitrix_sync.workflow_instances w where w.user_id = p_user_id
    union all
    select coalesce(w.finished_at, w.updated_at), 'workflow',
           case when w.state in ('succeeded', 'failed', 'cancelled') then 'finished' else 'now' end,
           jsonb_build_object('id', w.id, 'type', w.workflow_type, 'state', w.state, 'step', w.current_step,
                              'outcome', w.outcome, 'last_error_code', w.last_error_code, 'revision', w.revision,
                              'step_data', w.step_data, 'next_attempt_at', w.next_attempt_at), 6
      from bitrix_sync.workflow_instances w where w.user_id = p_user_id
    union all
    -- Commands and their outcomes (parameters and results are safe projections: IDs, flags, hashes).
    select c.created_at, 'command', c.command_type::text,
           jsonb_build_object('id', c.id, 'workflow_id', c.workflow_id, 'params', c.params), 5
      from bitrix_sync.crm_commands c where c.workflow_id = any(v_workflows)
    union all
    select coalesce(c.completed_at, c.updated_at), 'command', 'outcome',
           jsonb_build_object('id', c.id, 'type', c.command_type, 'status', c.status, 'attempts', c.attempt_count,
                              'sent_at', c.sent_at, 'last_error_code', c.last_error_code,
                              'http_status', c.last_http_status, 'bitrix_error', c.last_bitrix_error,
                              'response', c.response), 5
      from bitrix_sync.crm_commands c where c.workflow_id = any(v_workflows) and c.status <> 'pending'
    union all
    -- Webhooks about the user's Contacts.
    select i.received_at, 'webhook', i.receiver::text,
           jsonb_build_object('id', i.id, 'contact_id', i.entity_id, 'status', i.status, 'outcome', i.outcome,
                              'processed_at', i.processed_at, 'coalesced_into', i.coalesced_into,
                              'last_error_code', i.last_error_code), 7
      from bitrix_sync.webhook_inbox i where i.receiver = 'contact' and i.entity_id = any(v_contacts)
    union all
    -- Business alerts (details are masked when raised).
    select a.first_occurred_at, 'alert', a.alert_type::text,
           jsonb_build_object('alert_number', a.alert_number, 'severity', a.severity, 'status', a.status,
                              'occurrences', a.occurrence_count, 'last_occurred_at', a.last_occurred_at,
                              'current_contact_id', a.current_contact_id, 'selected_contact_id', a.selected_contact_id,
                              'candidate_contact_ids', a.candidate_contact_ids, 'details', a.details,
                              'item_id', a.item_id, 'stage_id', a.stage_id, 'mirror', a.crm_sync_status), 8
      from bitrix_sync.business_alerts a where a.user_id = p_user_id
    union all
    select a.closed_at, 'alert', 'closed', jsonb_build_object('alert_number', a.alert_number, 'status', a.status), 8
      from bitrix_sync.business_alerts a where a.user_id = p_user_id and a.closed_at is not null
    union all
    -- Technical dead letters of the user's work.
    select d.created_at, 'dead_letter', d.operation::text,
           jsonb_build_object('id', d.id, 'source', d.source, 'error_code', d.error_code, 'http_status', d.http_status,
                              'bitrix_error', d.bitrix_error, 'resolved_at', d.resolved_at, 'resolution', d.resolution), 9
      from bitrix_sync.technical_dead_letters d where d.workflow_id = any(v_workflows)
    union all
    -- The links, as history.
    select m.opened_at, 'mapping', 'opened',
           jsonb_build_object('id', m.id, 'contact_id', m.external_id, 'workflow_id', m.workflow_id), 10
      from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id
    union all
    select m.closed_at, 'mapping', 'closed',
           jsonb_build_object('id', m.id, 'contact_id', m.external_id, 'status', m.status, 'reason', m.close_reason,
                              'workflow_id', m.workflow_id), 10
      from bitrix_sync.entity_external_mapping m where m.entity_id = p_user_id and m.closed_at is not null
    union all
    -- What bitrix-sync last saw or wrote of each Contact: hashes (their start), no values.
    select coalesce(s.last_applied_at, s.updated_at), 'snapshot', 'state',
           jsonb_build_object('contact_id', s.contact_id, 'registered', s.registered, 'crm_updated_at', s.crm_updated_at,
                              'last_applied_source', s.last_applied_source,
                              'last_webhook_received_at', s.last_webhook_received_at,
                              'last_webhook_source_at', s.last_webhook_source_at, 'stale', s.stale,
                              'stale_reason', s.stale_reason, 'citizenship_enum_id', s.citizenship_enum_id,
                              'name_hash', left(s.name_hash, 12), 'email_hash', left(s.email_hash, 12),
                              'phone_hash', left(s.phone_hash, 12)), 11
      from bitrix_sync.contact_snapshots s where s.contact_id = any(v_contacts)
    union all
    -- Rebinds, admin decisions on the user's workflows, drift and its repairs.
    select r.requested_at, 'rebind', r.status::text,
           jsonb_build_object('id', r.id, 'previous_contact_id', r.previous_contact_id,
                              'target_contact_id', r.target_contact_id, 'workflow_id', r.workflow_id,
                              'completed_at', r.completed_at), 12
      from bitrix_sync.rebind_requests r where r.user_id = p_user_id
    union all
    select a.performed_at, 'admin', a.action::text,
           jsonb_build_object('id', a.id, 'workflow_id', a.workflow_id, 'decision', a.decision,
                              'operator_id', a.operator_id, 'db_user', a.db_user), 13
      from bitrix_sync.admin_actions a where a.workflow_id = any(v_workflows)
    union all
    select f.detected_at, 'drift', f.kind::text,
           jsonb_build_object('contact_id', f.contact_id, 'details', f.details, 'last_seen_at', f.last_seen_at,
                              'repair_requested_at', f.repair_requested_at, 'repair_intent', f.repair_intent), 14
      from bitrix_sync.drift_findings f where f.user_id = p_user_id
    union all
    select r.requested_at, 'repair', r.intent::text,
           jsonb_build_object('id', r.id, 'kinds', r.kinds, 'contact_id', r.contact_id,
                              'requested_by', r.requested_by, 'db_user', r.db_user), 15
      from bitrix_sync.drift_repairs r where r.user_id = p_user_id
  ) e
  order by e.at nulls last, e.ord;
end $$;
comment on function bitrix_sync.explain_user(uuid) is
  'Admin: one user''s story in time order (source, event, safe detail): the App''s identity and profile (statuses; phone, name, e-mail and citizenship masked), intents recorded and queued, workflows with their steps and outcomes, CRM commands and their results (IDs, flags, hashes), Contact webhooks, business alerts, dead letters, the link history, snapshots (hash prefixes), rebinds, admin decisions, drift findings and repairs. BS060 for an id nobody knows.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.explain_user(uuid)', array[]::text[], array['EXECUTE'], array[]::text[],
   'One user''s story in time order; personal values masked.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
