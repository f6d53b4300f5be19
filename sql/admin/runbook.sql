-- What the runbook's on-call steps read and do, as bitrix_sync_admin (docs/runbook.md): work that is
-- stuck (commands without an answer, workflows retrying for long, webhooks waiting), alert items
-- deleted in the CRM, the reconciliation cursors, and a reconciliation run queued now. Internal ids
-- and safe codes only: no phone, name, e-mail or raw error text (§15, §16). Views read the owner's
-- tables with the owner's rights, so the admin needs no grant on them.

create or replace view bitrix_sync.stuck_commands as
select c.id, c.command_type, c.status, c.attempt_count, c.last_error_code, c.last_http_status,
       c.last_bitrix_error, c.created_at, c.updated_at, c.workflow_id, w.state as workflow_state,
       w.current_step, w.last_error_code as workflow_error, c.alert_id
  from bitrix_sync.crm_commands c
  left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
 where c.status::text = any ('{uncertain,reconcile,retry_wait,in_flight}'::text[]);
comment on view bitrix_sync.stuck_commands is
  'Admin (docs/runbook.md, BitrixSyncCommandsUncertain): CRM commands that are uncertain, being reconciled, waiting for a retry or in flight, with their workflow''s state and step; safe codes only.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.stuck_commands', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: commands uncertain, being reconciled, retrying or in flight, with their workflow; safe codes only.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.retrying_workflows as
select w.id, w.workflow_type, w.current_step, w.attempt_count, w.last_error_code, w.next_attempt_at,
       w.created_at, c.command_type as last_command_type, c.status as last_command_status,
       c.last_error_code as last_command_error, c.last_http_status, c.last_bitrix_error
  from bitrix_sync.workflow_instances w
  left join lateral (select c.command_type, c.status, c.last_error_code, c.last_http_status,
                            c.last_bitrix_error
                       from bitrix_sync.crm_commands c
                      where c.workflow_id = w.id
                      order by c.id desc limit 1) c on true
 where w.state::text = 'waiting_retry';
comment on view bitrix_sync.retrying_workflows is
  'Admin (docs/runbook.md, BitrixSyncWorkflowsRetryingLong): workflows waiting for a retry, with their step, last error and their last command''s outcome; safe codes only.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.retrying_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: workflows waiting for a retry, with their last command; safe codes only.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.inbox_waiting as
select i.id, i.receiver, i.status, i.attempt_count, i.last_error_code, i.next_attempt_at, i.received_at
  from bitrix_sync.webhook_inbox i
 where i.status::text = any ('{received,retry_wait,processing}'::text[]);
comment on view bitrix_sync.inbox_waiting is
  'Admin (docs/runbook.md, BitrixSyncWebhookInboxStuck): robot webhooks not processed yet, by receiver and status, with their error code and next attempt; no entity IDs, source addresses or bodies.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.inbox_waiting', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: robot webhooks not processed yet; no entity IDs, addresses or bodies.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.deleted_alert_items as
select a.id, a.alert_number, a.alert_type, a.severity, a.item_id, a.closed_at
  from bitrix_sync.business_alerts a
 where a.status::text = 'remote_missing';
comment on view bitrix_sync.deleted_alert_items is
  'Admin (docs/runbook.md, BitrixSyncAlertItemsDeleted): open business alerts whose smart-process item was found deleted in the CRM (remote_missing, §10.3); no user or Contact IDs.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.deleted_alert_items', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: open alerts whose smart-process item was deleted in the CRM; no user or Contact IDs.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_reconciliation as
select r.job_type, r.watermark, r.overlap, r.last_run_started_at, r.last_success_at, r.last_run_status,
       r.last_error_code, r.last_scanned, r.last_updated, r.last_recovered, r.recovered_baseline,
       r.failed_runs, r.retry_at
  from bitrix_sync.reconciliation_cursors r;
comment on view bitrix_sync.status_reconciliation is
  'The reconciliation runs'' cursors (§10.2, §10.3) as an admin reads them: watermark, last run and its counts, last success, runs failed in a row and when a failed one runs again; no lease.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_reconciliation', array[]::text[], array['SELECT'], array[]::text[],
   'The reconciliation cursors without their leases (docs/runbook.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.request_reconciliation(
  p_job_type text, p_requested_by text, p_reason text
) returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_job_id bigint;
begin
  if p_job_type is null or p_job_type not in ('contacts', 'alerts') then
    raise exception 'unknown reconciliation %', coalesce(p_job_type, 'null')
      using errcode = 'BS004', hint = 'Name ''contacts'' (§10.2) or ''alerts'' (§10.3).';
  end if;
  perform bitrix_sync._check_admin_audit(p_reason, p_requested_by);
  perform bitrix_sync._record_admin_action(
    'request_reconciliation_' || p_job_type, null, null, null, null, p_reason, p_requested_by);
  -- Forced: the claim takes the run now, however recently the last one started.
  select (graphile_worker.add_job(
            'reconcile_' || p_job_type, json_build_object('force', true),
            job_key := 'reconcile_' || p_job_type || '_now', max_attempts := 1)).id
    into v_job_id;
  return v_job_id;
end $$;
comment on function bitrix_sync.request_reconciliation(text, text, text) is
  'Admin: queues a reconciliation run now (graphile-worker job reconcile_contacts or reconcile_alerts, forced), e.g. after a portal outage or a lost robot (docs/runbook.md). Audited in admin_actions. Returns the job id. BS004 for an unknown job type or a missing reason or operator.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.request_reconciliation(text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Runbook: a reconciliation run now, audited (security definer: it queues a graphile-worker job).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
