-- The operator's loop, rebind and parked workflows (issue 11): a contact.rebind that always finishes
-- (its request closes with the workflow, whatever ends it), App changes held while a rebind runs
-- and started after it, a retried clear of the previous Contact that reads it again first, and
-- audited admin functions to list, resume and cancel parked workflows and to cancel open rebind
-- requests (docs/admin.md).
set local lock_timeout = '10s';

-- An App intent that arrives while the user's contact.rebind runs is held on the rebind's row and
-- becomes the next workflow when the rebind ends (sql/workflows.sql).
alter table bitrix_sync.workflow_instances
  add column if not exists held_intent_type varchar(32),
  add column if not exists held_source_task_id uuid,
  add column if not exists held_content_hash varchar(64),
  add column if not exists held_at timestamptz;
-- The columns are new, so every existing row satisfies the constraints below: NOT VALID skips the
-- scan under an exclusive lock, and new and changed rows are checked all the same.
alter table bitrix_sync.workflow_instances
  add constraint workflow_instances_held_intent
  check (held_intent_type is null
         or held_intent_type in ('contact.map_or_create', 'contact.update', 'contact.deactivate')) not valid;
comment on column bitrix_sync.workflow_instances.held_intent_type is
  'Newest App intent that arrived while this contact.rebind ran; it starts as the next workflow when the rebind ends.';
comment on column bitrix_sync.workflow_instances.held_source_task_id is
  'han_app.sync_queue row of the held intent.';
comment on column bitrix_sync.workflow_instances.held_content_hash is
  'Content hash of the held intent (as content_hash).';
comment on column bitrix_sync.workflow_instances.held_at is 'When the held intent last arrived.';

-- What a finished rebind request left in the CRM, and who cancelled it and why.
alter table bitrix_sync.rebind_requests
  add column if not exists outcome varchar(64),
  add column if not exists cancelled_by varchar(128),
  add column if not exists cancel_reason text;
-- New columns, as above.
alter table bitrix_sync.rebind_requests
  add constraint rebind_requests_outcome_code check (outcome is null or outcome ~ '^[a-z][a-z0-9_]{2,63}$') not valid;
alter table bitrix_sync.rebind_requests
  add constraint rebind_requests_cancel_audit
  check (status = 'cancelled' or (cancel_reason is null and cancelled_by is null)) not valid;
comment on column bitrix_sync.rebind_requests.outcome is
  'What the CRM holds when the request finished: rebound, crm_unchanged, target_write_unconfirmed, target_written, target_written_clear_unconfirmed, target_written_previous_cleared (docs/admin.md).';
comment on column bitrix_sync.rebind_requests.cancelled_by is 'Operator who cancelled the request (cancel_rebind_request).';
comment on column bitrix_sync.rebind_requests.cancel_reason is 'Why the operator cancelled it (free text written by an admin).';

-- Who did what and why, for every admin function that changes a workflow or a request.
create table if not exists bitrix_sync.admin_actions (
  id bigint generated always as identity primary key,
  action varchar(64) not null check (action ~ '^[a-z][a-z0-9_]{2,63}$'),
  -- No foreign key: finished workflows may be removed by retention, their audit stays.
  workflow_id uuid,
  rebind_request_id uuid references bitrix_sync.rebind_requests (id),
  decision varchar(32) check (decision is null or decision ~ '^[a-z][a-z0-9_]{1,31}$'),
  contact_id varchar(128) check (contact_id is null or contact_id ~ '^[1-9][0-9]{0,17}$'),
  reason text not null check (length(btrim(reason)) between 3 and 500),
  operator_id varchar(128) not null check (length(btrim(operator_id)) > 0),
  db_user varchar(128) not null default session_user,
  performed_at timestamptz not null default now()
);
-- A new, empty table: the index builds instantly.
-- squawk-ignore require-concurrent-index-creation
create index if not exists admin_actions_workflow_idx on bitrix_sync.admin_actions (workflow_id, performed_at);
comment on table bitrix_sync.admin_actions is
  'Audit of the admin functions (resume and cancel of parked workflows, cancel of rebind requests): the action, what it applied to, the operator''s id and reason, the database login. Never deleted.';
comment on column bitrix_sync.admin_actions.action is 'resume_workflow, cancel_workflow, cancel_rebind_request, ...';
comment on column bitrix_sync.admin_actions.decision is 'The resume decision: retry, link_contact, create_contact.';
comment on column bitrix_sync.admin_actions.contact_id is 'The Contact a link_contact decision named.';
comment on column bitrix_sync.admin_actions.operator_id is 'Who acted (operator identifier, as given).';
comment on column bitrix_sync.admin_actions.db_user is 'The database login (session_user) that ran the function.';

-- #include sql/state_machines.sql
-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/rebind.sql
-- #include sql/admin_common.sql
-- #include sql/parked.sql
-- #include sql/rebind_admin.sql

-- Requests left open by a workflow that already finished (the paths that did not close them before
-- this migration) are closed now, as the trigger closes them from here on.
select bitrix_sync._close_rebind_request(w)
  from bitrix_sync.workflow_instances w
  join bitrix_sync.rebind_requests r on r.workflow_id = w.id
 where r.status in ('requested', 'in_progress') and w.state in ('succeeded', 'failed', 'cancelled');
-- #include sql/privileges.sql
-- #include sql/grants.sql
