--! Previous: sha1:86331a199dd3b973a91ff3c5548f07f00eff4b06
--! Hash: sha1:bd3d09d485b5153ad419f086afcc29f9119687f1
--! Message: expand

-- Expand (§6.1, §6.3 steps 1-5, §6.4, §7, §12.3, §13, §17): reshape han_app.sync_queue to the
-- full-sync contract without losing rows, create schema bitrix_sync with its tables, move the legacy
-- mapping into it (verified; never two writable copies), then install functions, triggers, views
-- and grants from sql/. See docs/migrations.md for the legacy shapes and the row mapping.
set local lock_timeout = '10s';

-- Roles first: grants below name them. Created NOLOGIN; deployment grants LOGIN (DESIGN.md).
-- >>> sql/roles.sql (included)
-- Roles (§13, DESIGN.md): created NOLOGIN if absent; deployment grants LOGIN and passwords.
-- Roles are cluster-wide, so this is safe to run in every database of the cluster.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'bitrix_sync_user') then
    create role bitrix_sync_user nologin;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'bitrix_sync_admin') then
    create role bitrix_sync_admin nologin;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'han_app_user') then
    create role han_app_user nologin;
  end if;
end $$;
comment on role bitrix_sync_user is 'bitrix-sync runtime: its own schema, queue processing, CRM-master profile columns. No DDL.';
comment on role bitrix_sync_admin is 'Operators: request_bitrix_contact_rebind(), settings functions and status views only.';
comment on role han_app_user is 'The HAN App: writes identity and profile; sync_queue rows appear through the trigger.';
-- <<< sql/roles.sql

------------------------------------------------------------------------------------------------
-- han_app.sync_queue: legacy -> §6.1
------------------------------------------------------------------------------------------------
alter table han_app.sync_queue
  add column if not exists locked_by varchar(128),
  add column if not exists locked_until timestamptz,
  add column if not exists lease_token uuid,
  add column if not exists last_error_code varchar(64),
  add column if not exists last_error_at timestamptz,
  add column if not exists completed_at timestamptz,
  add column if not exists cancel_reason varchar(255);

-- Legacy statuses: processing (the stub held it; nobody holds it now) -> pending, done -> processed,
-- failed -> dead_letter. The free-text last_error may hold PII (§16), so only the fact of an error
-- survives, as a code.
update han_app.sync_queue
   set status = case status
                  when 'processing' then 'pending'
                  when 'done' then 'processed'
                  when 'failed' then 'dead_letter'
                  else status
                end,
       completed_at = case when status in ('done', 'failed') then updated_at end,
       last_error_code = case when last_error is not null then 'legacy_stub_error' end,
       last_error_at = case when last_error is not null then updated_at end
 where status in ('processing', 'done', 'failed') or last_error is not null;

-- Active rows of a task type the full sync does not know can never be processed: cancel them with a
-- reason instead of deleting them.
update han_app.sync_queue
   set status = 'cancelled', cancel_reason = 'legacy_unknown_task_type', completed_at = now()
 where status in ('pending', 'retry_wait')
   and task_type not in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind');

-- squawk-ignore ban-drop-column
alter table han_app.sync_queue drop column if exists last_error;

alter table han_app.sync_queue
  alter column status set default 'pending',
  alter column payload_json set default '{}'::jsonb;

-- sync_queue is a small work queue and §17 stops its only writer (the stub) before migrating, so
-- validating constraints and building indexes inside this transaction blocks nobody.
alter table han_app.sync_queue drop constraint if exists sync_queue_status_check;
-- squawk-ignore constraint-missing-not-valid
alter table han_app.sync_queue add constraint sync_queue_status_check
  check (status in ('pending', 'leased', 'processed', 'retry_wait', 'dead_letter', 'cancelled'));
-- Rows already finished may carry a legacy task type; new and active ones may not.
alter table han_app.sync_queue drop constraint if exists sync_queue_task_type_check;
-- squawk-ignore constraint-missing-not-valid
alter table han_app.sync_queue add constraint sync_queue_task_type_check
  check (status in ('processed', 'dead_letter', 'cancelled')
         or task_type in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind'));
alter table han_app.sync_queue drop constraint if exists sync_queue_lease_check;
-- squawk-ignore constraint-missing-not-valid
alter table han_app.sync_queue add constraint sync_queue_lease_check
  check ((status = 'leased') = (lease_token is not null and locked_until is not null and locked_by is not null));
alter table han_app.sync_queue drop constraint if exists sync_queue_attempt_count_check;
-- squawk-ignore constraint-missing-not-valid
alter table han_app.sync_queue add constraint sync_queue_attempt_count_check check (attempt_count >= 0);

-- The global UNIQUE(dedup_key) would forbid a new intent forever once one finished (§6.1).
alter table han_app.sync_queue drop constraint if exists sync_queue_dedup_key_key;
-- squawk-ignore require-concurrent-index-creation
create unique index if not exists sync_queue_dedup_active_uq
  on han_app.sync_queue (dedup_key) where status in ('pending', 'leased', 'retry_wait');
-- squawk-ignore require-concurrent-index-creation
create index if not exists sync_queue_claim_idx on han_app.sync_queue (status, next_attempt_at, created_at);
-- squawk-ignore require-concurrent-index-creation
create index if not exists sync_queue_lease_idx on han_app.sync_queue (locked_until) where status = 'leased';
-- squawk-ignore require-concurrent-index-creation
create index if not exists sync_queue_entity_idx on han_app.sync_queue (entity_type, entity_id, created_at desc);

comment on table han_app.sync_queue is
  'Business intents of the App for the CRM (§6.1), written by han_app.enqueue_contact_sync() in the App''s own transaction and processed by bitrix-sync under leases. Payloads carry identifiers only, never PII.';
comment on column han_app.sync_queue.task_type is 'contact.map_or_create | contact.update | contact.deactivate | contact.rebind.';
comment on column han_app.sync_queue.entity_type is 'Always ''user''.';
comment on column han_app.sync_queue.entity_id is 'han_app.user_identity.id, also for profile events.';
comment on column han_app.sync_queue.dedup_key is 'One active (pending|leased|retry_wait) row per key: <task_type>:user:<user id>. Finished rows do not block new intents.';
comment on column han_app.sync_queue.payload_json is '{schema_version, user_id, reason, source_updated_at}: identifiers and safe versions only (§6.2).';
comment on column han_app.sync_queue.status is 'pending | leased | processed | retry_wait | dead_letter | cancelled (§6.1).';
comment on column han_app.sync_queue.attempt_count is 'Claims so far.';
comment on column han_app.sync_queue.next_attempt_at is 'Not claimable before this time.';
comment on column han_app.sync_queue.locked_by is 'Worker id holding the lease.';
comment on column han_app.sync_queue.locked_until is 'Lease expiry; an expired lease may be reclaimed by anyone.';
comment on column han_app.sync_queue.lease_token is 'Fencing token, new on every claim; every completion must present it.';
comment on column han_app.sync_queue.last_error_code is 'Safe error code of the last failure (never raw text).';
comment on column han_app.sync_queue.last_error_at is 'When last_error_code was set.';
comment on column han_app.sync_queue.completed_at is 'When the row reached processed, dead_letter or cancelled.';
comment on column han_app.sync_queue.cancel_reason is 'Why the row was cancelled, e.g. initial_full_sync_cutover.';
comment on column han_app.sync_queue.created_at is 'When the intent was first recorded.';
comment on column han_app.sync_queue.updated_at is 'Last change, including coalescing of a newer intent.';

------------------------------------------------------------------------------------------------
-- schema bitrix_sync (§6.3, §6.4)
------------------------------------------------------------------------------------------------
create schema if not exists bitrix_sync;
comment on schema bitrix_sync is 'Owned by bitrix-sync: mapping, workflows, CRM commands, inbox, alerts, settings and audit.';

create table bitrix_sync.entity_external_mapping (
  id uuid primary key default gen_random_uuid(),
  entity_type varchar(64) not null default 'user' check (entity_type = 'user'),
  entity_id uuid not null,
  external_system varchar(32) not null default 'bitrix24' check (external_system = 'bitrix24'),
  external_entity_type varchar(32) not null default 'contact' check (external_entity_type = 'contact'),
  external_id varchar(128) not null check (external_id ~ '^[1-9][0-9]{0,17}$'),
  status varchar(16) not null default 'active' check (status in ('active', 'closed', 'broken')),
  opened_at timestamptz not null default now(),
  closed_at timestamptz,
  close_reason varchar(64),
  workflow_id uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint entity_external_mapping_active_open check (status <> 'active' or (closed_at is null and close_reason is null)),
  constraint entity_external_mapping_closed_documented check (status = 'active' or (closed_at is not null and close_reason is not null))
);
create unique index entity_external_mapping_active_entity_uq
  on bitrix_sync.entity_external_mapping (external_system, entity_type, entity_id) where status = 'active';
create unique index entity_external_mapping_active_external_uq
  on bitrix_sync.entity_external_mapping (external_system, external_entity_type, external_id) where status = 'active';
create index entity_external_mapping_entity_idx on bitrix_sync.entity_external_mapping (entity_id, opened_at desc);
create index entity_external_mapping_external_idx on bitrix_sync.entity_external_mapping (external_id);
comment on table bitrix_sync.entity_external_mapping is
  'The canonical user <-> Bitrix24 Contact link (§4, §6.3). At most one active row per user and per Contact; rows are never deleted (history). Written only through bitrix_sync mapping functions by the runtime role.';
comment on column bitrix_sync.entity_external_mapping.entity_id is 'han_app.user_identity.id.';
comment on column bitrix_sync.entity_external_mapping.external_id is 'Bitrix24 Contact ID as text.';
comment on column bitrix_sync.entity_external_mapping.status is 'active | closed | broken. closed and broken are final.';
comment on column bitrix_sync.entity_external_mapping.close_reason is 'Why the link ended: deactivated, rebound, taken_over, contact_not_found, legacy_duplicate, ...';
comment on column bitrix_sync.entity_external_mapping.workflow_id is 'Workflow that opened or last closed the row (correlation).';

create table bitrix_sync.workflow_instances (
  id uuid primary key default gen_random_uuid(),
  workflow_type varchar(32) not null
    check (workflow_type in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind')),
  intent_type varchar(32) not null
    check (intent_type in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind')),
  user_id uuid not null,
  contact_id varchar(128),
  state varchar(16) not null default 'created'
    check (state in ('created', 'running', 'waiting_crm', 'waiting_retry', 'waiting_manual', 'succeeded', 'failed', 'cancelled')),
  current_step varchar(64) not null default 'start',
  step_data jsonb not null default '{}'::jsonb,
  source_task_id uuid,
  revision integer not null default 1 check (revision >= 1),
  processed_revision integer not null default 0 check (processed_revision >= 0),
  content_hash varchar(64),
  attempt_count integer not null default 0 check (attempt_count >= 0),
  next_attempt_at timestamptz not null default now(),
  deadline_at timestamptz not null default now() + interval '24 hours',
  lease_token uuid,
  locked_by varchar(128),
  locked_until timestamptz,
  outcome varchar(64),
  last_error_code varchar(64),
  correlation_id uuid not null default gen_random_uuid(),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  finished_at timestamptz,
  constraint workflow_instances_finished check ((state in ('succeeded', 'failed', 'cancelled')) = (finished_at is not null)),
  constraint workflow_instances_lease check ((lease_token is null) = (locked_until is null))
);
create unique index workflow_instances_one_active_per_user_uq
  on bitrix_sync.workflow_instances (user_id) where state not in ('succeeded', 'failed', 'cancelled');
create index workflow_instances_runnable_idx
  on bitrix_sync.workflow_instances (next_attempt_at) where state in ('created', 'running', 'waiting_retry');
create index workflow_instances_user_idx on bitrix_sync.workflow_instances (user_id, created_at desc);
comment on table bitrix_sync.workflow_instances is
  'One durable scenario per user at a time (§7.1). Every step is a persisted transition; at most one active CRM command per workflow.';
comment on column bitrix_sync.workflow_instances.workflow_type is 'The scenario the workflow was started for.';
comment on column bitrix_sync.workflow_instances.intent_type is 'Newest intent joined into the workflow; it converges to this after its current step.';
comment on column bitrix_sync.workflow_instances.contact_id is 'Bitrix24 Contact the workflow works on, once known.';
comment on column bitrix_sync.workflow_instances.current_step is 'Name of the step the workflow is at, e.g. find_by_phone, read_candidates, create_contact.';
comment on column bitrix_sync.workflow_instances.step_data is 'Safe step state: Contact IDs, counts, flags. Never PII.';
comment on column bitrix_sync.workflow_instances.source_task_id is 'han_app.sync_queue row that started or last joined the workflow.';
comment on column bitrix_sync.workflow_instances.revision is 'Intent revision: bumped when a newer intent joins the running workflow.';
comment on column bitrix_sync.workflow_instances.processed_revision is 'Revision the last finished pass processed; a result confirms only that revision.';
comment on column bitrix_sync.workflow_instances.content_hash is 'SHA-256 (hex) of the desired App-master content; equal content skips a pass.';
comment on column bitrix_sync.workflow_instances.deadline_at is 'Retry horizon: 24 h from the first attempt (§9).';
comment on column bitrix_sync.workflow_instances.lease_token is 'Fencing token of the worker stepping the workflow.';
comment on column bitrix_sync.workflow_instances.outcome is 'Safe outcome code when finished, e.g. created, mapped_existing, restored, deactivated.';
comment on column bitrix_sync.workflow_instances.correlation_id is 'Propagated to commands, alerts, logs and traces.';

create table bitrix_sync.business_alerts (
  id bigint generated always as identity primary key,
  alert_number bigint not null unique,
  alert_type varchar(64) not null check (alert_type ~ '^[a-z][a-z0-9_]{2,63}$'),
  severity varchar(16) not null default 'medium' check (severity in ('low', 'medium', 'high', 'critical')),
  fingerprint varchar(64) not null check (fingerprint ~ '^[0-9a-f]{64}$'),
  user_id uuid,
  current_contact_id varchar(128),
  selected_contact_id varchar(128),
  candidate_contact_ids jsonb not null default '[]'::jsonb check (jsonb_typeof(candidate_contact_ids) = 'array'),
  details jsonb not null default '{}'::jsonb,
  status varchar(16) not null default 'open' check (status in ('open', 'resolved', 'closed', 'remote_missing')),
  item_id bigint,
  stage_id varchar(64),
  crm_sync_status varchar(16) not null default 'pending' check (crm_sync_status in ('pending', 'synced', 'failed')),
  occurrence_count integer not null default 1 check (occurrence_count >= 1),
  first_occurred_at timestamptz not null default now(),
  last_occurred_at timestamptz not null default now(),
  previous_alert_id bigint references bitrix_sync.business_alerts (id),
  correlation_id uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  closed_at timestamptz,
  constraint business_alerts_closed check ((status = 'open') = (closed_at is null))
);
create sequence bitrix_sync.business_alert_number_seq owned by bitrix_sync.business_alerts.alert_number;
alter table bitrix_sync.business_alerts alter column alert_number set default nextval('bitrix_sync.business_alert_number_seq');
create unique index business_alerts_open_uq on bitrix_sync.business_alerts (alert_type, fingerprint) where status = 'open';
create index business_alerts_item_idx on bitrix_sync.business_alerts (item_id) where item_id is not null;
comment on table bitrix_sync.business_alerts is
  'Business conflicts (§11), mirrored into the Bitrix24 smart process. One open alert per (alert_type, fingerprint); a repeat bumps occurrence_count; after a terminal stage a new case opens a new alert linked to the previous one.';
comment on column bitrix_sync.business_alerts.alert_number is 'Internal sequence number shown in the smart-process item.';
comment on column bitrix_sync.business_alerts.fingerprint is 'SHA-256 hex of the conflict identity (type + stable ids); not a label, not shown.';
comment on column bitrix_sync.business_alerts.details is 'Safe details only: codes and counts (§15); never values read from the App or the CRM.';
comment on column bitrix_sync.business_alerts.status is 'open | resolved | closed | remote_missing (item deleted in the CRM).';
comment on column bitrix_sync.business_alerts.item_id is 'Bitrix24 smart-process item ID once created.';
comment on column bitrix_sync.business_alerts.stage_id is 'Last known smart-process stage.';
comment on column bitrix_sync.business_alerts.crm_sync_status is 'Whether the smart-process item reflects this row: pending (needs add/update), synced, failed.';
comment on column bitrix_sync.business_alerts.previous_alert_id is 'The earlier alert of the same (type, fingerprint) closed before this one opened.';

create table bitrix_sync.crm_commands (
  id bigint generated always as identity primary key,
  workflow_id uuid references bitrix_sync.workflow_instances (id),
  alert_id bigint references bitrix_sync.business_alerts (id),
  command_type varchar(48) not null
    check (command_type in ('contact.find_by_phone', 'contact.read', 'contact.add', 'contact.update',
                            'contact.list_changed', 'citizenship.list',
                            'alert.add', 'alert.update', 'alert.get', 'alert.list')),
  params jsonb not null default '{}'::jsonb,
  status varchar(16) not null default 'pending'
    check (status in ('pending', 'leased', 'in_flight', 'succeeded', 'retry_wait', 'uncertain', 'reconcile', 'dead_letter')),
  revision integer not null default 1,
  attempt_count integer not null default 0 check (attempt_count >= 0),
  limit_hits integer not null default 0 check (limit_hits >= 0),
  next_attempt_at timestamptz not null default now(),
  deadline_at timestamptz not null default now() + interval '24 hours',
  lease_token uuid,
  locked_by varchar(128),
  locked_until timestamptz,
  batch_id uuid,
  correlation_id uuid,
  sent_at timestamptz,
  response jsonb,
  last_error_code varchar(64),
  last_http_status integer,
  last_bitrix_error varchar(64),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  completed_at timestamptz,
  constraint crm_commands_owner check (workflow_id is not null or alert_id is not null),
  constraint crm_commands_lease check ((status in ('leased', 'in_flight')) = (lease_token is not null and locked_until is not null)),
  constraint crm_commands_completed check ((status in ('succeeded', 'dead_letter')) = (completed_at is not null))
);
-- One active command per workflow (§7.1); alert commands are independent of workflow steps.
-- uncertain/reconcile commands are parked while the workflow runs its recovery search (§7.2).
create unique index crm_commands_one_active_per_workflow_uq on bitrix_sync.crm_commands (workflow_id)
  where alert_id is null and status in ('pending', 'leased', 'in_flight', 'retry_wait');
create index crm_commands_claim_idx on bitrix_sync.crm_commands (next_attempt_at, id)
  where status in ('pending', 'retry_wait');
create index crm_commands_lease_idx on bitrix_sync.crm_commands (locked_until) where status in ('leased', 'in_flight');
create index crm_commands_workflow_idx on bitrix_sync.crm_commands (workflow_id, id);
comment on table bitrix_sync.crm_commands is
  'Concrete CRM calls (§6.4, §7.2). One command is one sub-request of a Bitrix24 batch. command_type is a closed catalogue mapped to REST methods in TypeScript: the database holds no method names.';
comment on column bitrix_sync.crm_commands.params is 'Safe request parameters: IDs, flags, field choices. Values with PII (phone, email, name) are read from the App at send time, not stored.';
comment on column bitrix_sync.crm_commands.status is 'pending | leased | in_flight | succeeded | retry_wait | uncertain | reconcile | dead_letter (§7.2).';
comment on column bitrix_sync.crm_commands.revision is 'Workflow revision this command serves.';
comment on column bitrix_sync.crm_commands.attempt_count is 'Sends so far, rate-limit refusals included; the attempts that count against the retry budget are attempt_count - limit_hits.';
comment on column bitrix_sync.crm_commands.limit_hits is 'Times the portal refused the call for rate (QUERY_LIMIT_EXCEEDED).';
comment on column bitrix_sync.crm_commands.deadline_at is 'Retry horizon, 24 h after the first attempt (§9).';
comment on column bitrix_sync.crm_commands.batch_id is 'The HTTP batch the command was last sent in.';
comment on column bitrix_sync.crm_commands.sent_at is 'Durable "send started" marker, committed before a write leaves; a write in_flight with sent_at and no result becomes uncertain, never resent blindly.';
comment on column bitrix_sync.crm_commands.response is 'Safe projection of the reply (IDs, counts, timestamps); never raw text.';
comment on column bitrix_sync.crm_commands.last_bitrix_error is 'Bitrix24 error code of the last failure (may be empty-string-derived codes such as legacy_not_found).';

create table bitrix_sync.webhook_inbox (
  id bigint generated always as identity primary key,
  receiver varchar(16) not null check (receiver in ('contact', 'alert')),
  event_type varchar(32) not null default 'robot' check (event_type ~ '^[a-z][a-z0-9_.]{1,31}$'),
  event_id varchar(128),
  source_ts timestamptz,
  entity_type_id integer not null check (entity_type_id > 0),
  entity_id varchar(32) not null check (entity_id ~ '^[1-9][0-9]{0,17}$'),
  status varchar(16) not null default 'received'
    check (status in ('received', 'coalesced', 'processing', 'processed', 'retry_wait', 'dead_letter')),
  coalesced_into bigint references bitrix_sync.webhook_inbox (id),
  dedup_fingerprint varchar(64),
  source_ip inet,
  attempt_count integer not null default 0 check (attempt_count >= 0),
  next_attempt_at timestamptz not null default now(),
  lease_token uuid,
  locked_by varchar(128),
  locked_until timestamptz,
  outcome varchar(64),
  last_error_code varchar(64),
  received_at timestamptz not null default now(),
  status_at timestamptz not null default now(),
  processed_at timestamptz,
  constraint webhook_inbox_lease check ((status = 'processing') = (lease_token is not null)),
  constraint webhook_inbox_coalesced check ((status = 'coalesced') = (coalesced_into is not null) or status = 'processed')
);
create index webhook_inbox_pending_idx on bitrix_sync.webhook_inbox (receiver, entity_id, id)
  where status in ('received', 'retry_wait', 'processing');
create index webhook_inbox_claim_idx on bitrix_sync.webhook_inbox (next_attempt_at, id) where status in ('received', 'retry_wait');
create unique index webhook_inbox_event_uq on bitrix_sync.webhook_inbox (receiver, event_id) where event_id is not null;
comment on table bitrix_sync.webhook_inbox is
  'Durable record of each accepted robot webhook (§10.1, §7.3), written before the 200 reply. Pending events of one entity are coalesced into one CRM read. Holds no query string, token or body.';
comment on column bitrix_sync.webhook_inbox.event_id is 'Stable event ID when the source provides one (the robot does not); unique when present.';
comment on column bitrix_sync.webhook_inbox.source_ts is 'Source timestamp when provided; ordering is otherwise decided by the Contact''s updatedTime at read time.';
comment on column bitrix_sync.webhook_inbox.entity_type_id is '3 for Contacts, the smart-process entityTypeId for alerts.';
comment on column bitrix_sync.webhook_inbox.entity_id is 'Contact ID or smart-process item ID from document_id[2].';
comment on column bitrix_sync.webhook_inbox.coalesced_into is 'The event whose single CRM read covered this one.';
comment on column bitrix_sync.webhook_inbox.source_ip is 'Peer address, audit metadata only (never a metric label).';
comment on column bitrix_sync.webhook_inbox.outcome is 'Safe outcome code: applied, stale, unknown_mapping, user_id_mismatch, contact_not_found, ...';

create table bitrix_sync.rebind_requests (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null,
  previous_contact_id varchar(128),
  target_contact_id varchar(128) not null check (target_contact_id ~ '^[1-9][0-9]{0,17}$'),
  reason text not null check (length(btrim(reason)) between 3 and 500),
  operator_id varchar(128) not null check (length(btrim(operator_id)) > 0),
  workflow_id uuid references bitrix_sync.workflow_instances (id),
  status varchar(16) not null default 'requested'
    check (status in ('requested', 'in_progress', 'succeeded', 'failed', 'cancelled')),
  failure_code varchar(64),
  requested_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  completed_at timestamptz
);
create unique index rebind_requests_one_open_per_user_uq on bitrix_sync.rebind_requests (user_id)
  where status in ('requested', 'in_progress');
comment on table bitrix_sync.rebind_requests is
  'Audited requests to move a user''s link to another Contact (§5.4). Created by request_bitrix_contact_rebind(); the mapping changes only when the workflow has updated both Contacts.';
comment on column bitrix_sync.rebind_requests.reason is 'Operator''s justification (free text written by an admin; not derived from CRM data).';
comment on column bitrix_sync.rebind_requests.operator_id is 'Who asked (operator identifier, not a DB role).';

create table bitrix_sync.contact_snapshots (
  contact_id varchar(128) primary key check (contact_id ~ '^[1-9][0-9]{0,17}$'),
  user_id uuid not null,
  name_hash varchar(64),
  email_hash varchar(64),
  phone_hash varchar(64),
  citizenship_enum_id varchar(32),
  citizenship_dictionary_loaded_at timestamptz,
  registered boolean,
  crm_created_at timestamptz,
  crm_updated_at timestamptz,
  last_applied_source varchar(16) check (last_applied_source in ('app_create', 'webhook', 'reconciliation')),
  last_applied_at timestamptz,
  last_webhook_received_at timestamptz,
  last_webhook_source_at timestamptz,
  stale boolean not null default false,
  stale_reason varchar(64),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index contact_snapshots_user_idx on bitrix_sync.contact_snapshots (user_id);
comment on table bitrix_sync.contact_snapshots is
  'What bitrix-sync last saw or wrote of each linked Contact (§6.4): hashes instead of values, the citizenship enum ID, CRM source timestamps and which path applied them. Decides whether an event is newer than what the App holds.';
comment on column bitrix_sync.contact_snapshots.name_hash is 'SHA-256 hex of NAME as applied; no value copies.';
comment on column bitrix_sync.contact_snapshots.crm_updated_at is 'Contact updatedTime last applied; older reads change nothing.';
comment on column bitrix_sync.contact_snapshots.last_applied_source is 'app_create | webhook | reconciliation.';
comment on column bitrix_sync.contact_snapshots.stale is 'The App profile may be behind the CRM (e.g. Contact not found); profile values are kept, not cleared.';

create table bitrix_sync.settings (
  key varchar(64) primary key check (key ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$'),
  value_type varchar(16) not null check (value_type in ('integer', 'number', 'text', 'boolean', 'enum', 'json')),
  default_value jsonb,
  min_value numeric,
  max_value numeric,
  allowed_values jsonb check (allowed_values is null or jsonb_typeof(allowed_values) = 'array'),
  nullable boolean not null default false,
  description text not null
);
comment on table bitrix_sync.settings is
  'Catalogue of hot settings (§12.3): type, bounds and default of each key. Values live in settings_versions; secrets, DSNs, field names, portal identity, CIDRs and cutover mode are never here.';
comment on column bitrix_sync.settings.default_value is 'Used when a version does not set the key; null with nullable = true means "not configured".';

create table bitrix_sync.settings_versions (
  version integer generated always as identity primary key,
  status varchar(16) not null default 'draft'
    check (status in ('draft', 'validated', 'rejected', 'active', 'superseded')),
  settings_values jsonb not null check (jsonb_typeof(settings_values) = 'object'),
  validation_errors jsonb,
  based_on integer references bitrix_sync.settings_versions (version),
  rollback_of integer references bitrix_sync.settings_versions (version),
  note text,
  created_by varchar(128) not null,
  created_at timestamptz not null default now(),
  validated_at timestamptz,
  activated_by varchar(128),
  activated_at timestamptz,
  superseded_at timestamptz
);
create unique index settings_versions_one_active_uq on bitrix_sync.settings_versions ((true)) where status = 'active';
comment on table bitrix_sync.settings_versions is
  'Versions of the hot settings with validation status and audit. Exactly one active version; only a validated version can be activated; rollback activates a copy of an earlier version.';
comment on column bitrix_sync.settings_versions.settings_values is 'Complete key -> value object of this version.';
comment on column bitrix_sync.settings_versions.rollback_of is 'For a rollback: the earlier version whose values this one restores.';

create table bitrix_sync.technical_dead_letters (
  id bigint generated always as identity primary key,
  source varchar(16) not null check (source in ('sync_queue', 'workflow', 'crm_command', 'webhook')),
  source_id varchar(64) not null,
  workflow_id uuid,
  command_id bigint,
  operation varchar(64) not null,
  error_code varchar(64) not null check (error_code ~ '^[a-z0-9_.]+$'),
  http_status integer,
  bitrix_error varchar(64),
  attempt_count integer not null default 0,
  first_attempt_at timestamptz,
  deadline_at timestamptz,
  correlation_id uuid,
  created_at timestamptz not null default now(),
  resolved_at timestamptz,
  resolved_by varchar(128)
);
create index technical_dead_letters_open_idx on bitrix_sync.technical_dead_letters (created_at) where resolved_at is null;
comment on table bitrix_sync.technical_dead_letters is
  'Technical failures that exhausted retries or can never succeed (§9). Safe codes and metadata only: no raw replies, no PII, no secrets. Business conflicts go to business_alerts instead.';
comment on column bitrix_sync.technical_dead_letters.operation is 'Task or command type, e.g. contact.add.';
comment on column bitrix_sync.technical_dead_letters.error_code is 'Safe snake_case code from the classifier.';

create table bitrix_sync.reconciliation_cursors (
  job_type varchar(32) primary key check (job_type in ('contacts', 'alerts')),
  watermark timestamptz,
  overlap interval not null default interval '2 minutes' check (overlap >= interval '0'),
  last_run_started_at timestamptz,
  last_success_at timestamptz,
  last_run_status varchar(16) check (last_run_status in ('running', 'succeeded', 'failed')),
  last_error_code varchar(64),
  last_scanned integer,
  last_updated integer,
  last_recovered integer,
  recovered_baseline numeric,
  updated_at timestamptz not null default now()
);
comment on table bitrix_sync.reconciliation_cursors is
  'Incremental reconciliation state (§10.2, §10.3). The watermark moves only after a whole successful run; the overlap re-reads the boundary.';
comment on column bitrix_sync.reconciliation_cursors.last_recovered is 'Contacts the last run found newer than their snapshot without a processed webhook.';
comment on column bitrix_sync.reconciliation_cursors.recovered_baseline is 'Smoothed usual value of last_recovered, for the spike alert.';

create table bitrix_sync.cutover (
  singleton boolean primary key default true check (singleton),
  cutover_watermark timestamptz not null,
  cancelled_count integer not null,
  performed_by varchar(128) not null,
  performed_at timestamptz not null default now()
);
comment on table bitrix_sync.cutover is
  'The one-time switch from the stub to full sync (§17): the watermark and what was cancelled. At most one row.';

------------------------------------------------------------------------------------------------
-- Move the legacy mapping (§6.3 steps 1-5), in this transaction: copy, verify, drop.
------------------------------------------------------------------------------------------------
-- Legacy rows must be bitrix24 Contact links of users with a numeric Contact ID; anything else
-- cannot be represented and stops the migration so a person can look at it.
do $$
declare
  v_bad bigint;
begin
  select count(*) into v_bad
    from han_app.entity_external_mapping l
   where l.external_system <> 'bitrix24' or l.external_entity_type <> 'contact' or l.entity_type <> 'user'
      or l.external_id !~ '^[1-9][0-9]{0,17}$';
  if v_bad > 0 then
    raise exception 'legacy mapping has % row(s) that are not bitrix24 user->Contact links with a numeric Contact ID', v_bad
      using errcode = 'BS090',
            hint = 'Inspect han_app.entity_external_mapping, fix or remove those rows with the App owners, then re-run the migration.';
  end if;
  select count(*) into v_bad
    from han_app.client_profile p
   where p.bitrix_contact_id is not null and p.bitrix_contact_id !~ '^[1-9][0-9]{0,17}$'
     and not exists (select 1 from han_app.entity_external_mapping l where l.entity_id = p.user_id);
  if v_bad > 0 then
    raise exception 'client_profile.bitrix_contact_id has % non-numeric value(s) with no legacy mapping row', v_bad
      using errcode = 'BS090',
            hint = 'Clear or correct those values with the App owners, then re-run the migration.';
  end if;
end $$;

-- Every link the stub era knew: the legacy table, plus profile-only links (the column without a
-- table row). The earliest link per user and per Contact becomes active; a later duplicate of the
-- same Contact is kept as history, closed as legacy_duplicate.
create temporary table legacy_links on commit drop as
select l.id, l.entity_id, l.external_id, l.created_at, l.updated_at
  from han_app.entity_external_mapping l
union all
select gen_random_uuid(), p.user_id, p.bitrix_contact_id, p.created_at, p.updated_at
  from han_app.client_profile p
 where p.bitrix_contact_id is not null
   and not exists (select 1 from han_app.entity_external_mapping l where l.entity_id = p.user_id);

insert into bitrix_sync.entity_external_mapping
  (id, entity_type, entity_id, external_system, external_entity_type, external_id, status,
   opened_at, closed_at, close_reason, created_at, updated_at)
select id, 'user', entity_id, 'bitrix24', 'contact', external_id,
       case when rank_by_contact = 1 then 'active' else 'broken' end,
       created_at,
       case when rank_by_contact = 1 then null else now() end,
       case when rank_by_contact = 1 then null else 'legacy_duplicate' end,
       created_at, updated_at
  from (select ll.*, row_number() over (partition by external_id order by created_at, id) as rank_by_contact
          from legacy_links ll) ranked;

-- Verify the copy before the old table goes: same rows, same links, same count.
do $$
declare
  v_source bigint;
  v_target bigint;
  v_missing bigint;
begin
  select count(*) into v_source from legacy_links;
  select count(*) into v_target from bitrix_sync.entity_external_mapping;
  select count(*) into v_missing
    from (select id, entity_id, external_id, created_at from legacy_links
          except
          select id, entity_id, external_id, opened_at from bitrix_sync.entity_external_mapping) m;
  if v_source <> v_target or v_missing <> 0 then
    raise exception 'mapping copy does not match the legacy data (% legacy links, % copied, % missing)', v_source, v_target, v_missing
      using errcode = 'BS091',
            hint = 'Nothing was changed: the migration rolled back. Report this with the counts; do not edit the tables by hand.';
  end if;
end $$;

-- Steps 4-5: no App grant or writable copy remains.
revoke all on han_app.entity_external_mapping from public;
drop table han_app.entity_external_mapping;

------------------------------------------------------------------------------------------------
-- Functions, triggers, views, grants (current state lives in sql/)
------------------------------------------------------------------------------------------------
-- >>> sql/common.sql (included)
-- Shared helper of schema bitrix_sync: updated_at maintenance.

create or replace function bitrix_sync.tg__set_updated_at() returns trigger
language plpgsql as $$
begin
  new.updated_at := now();
  return new;
end $$;
comment on function bitrix_sync.tg__set_updated_at() is
  'BEFORE UPDATE trigger: stamps updated_at with the transaction time.';
-- <<< sql/common.sql
-- >>> sql/state_machines.sql (included)
-- State machines (§6.1, §7.1, §7.2, §7.3, §6.3): the legal edges as data, and one guard trigger per
-- table that refuses any UPDATE of the state column not on this list, whoever writes it.
-- docs/state-machines.md draws the same edges; a test keeps the two equal.

create or replace view bitrix_sync.state_edges as
select machine, from_state, to_state, event
  from (values
    -- han_app.sync_queue (§6.1)
    ('sync_queue', 'pending', 'leased', 'claim'),
    ('sync_queue', 'retry_wait', 'leased', 'claim'),
    ('sync_queue', 'leased', 'processed', 'complete'),
    ('sync_queue', 'leased', 'retry_wait', 'retry'),
    ('sync_queue', 'leased', 'dead_letter', 'dead_letter'),
    ('sync_queue', 'leased', 'cancelled', 'cancel'),
    ('sync_queue', 'leased', 'pending', 'release'),
    ('sync_queue', 'retry_wait', 'pending', 'newer_intent'),
    ('sync_queue', 'pending', 'cancelled', 'cancel'),
    ('sync_queue', 'retry_wait', 'cancelled', 'cancel'),
    -- bitrix_sync.workflow_instances (§7.1)
    ('workflow', 'created', 'running', 'start'),
    ('workflow', 'created', 'cancelled', 'cancel'),
    ('workflow', 'running', 'waiting_crm', 'await_crm'),
    ('workflow', 'running', 'waiting_retry', 'schedule_retry'),
    ('workflow', 'running', 'waiting_manual', 'need_manual'),
    ('workflow', 'running', 'succeeded', 'succeed'),
    ('workflow', 'running', 'failed', 'fail'),
    ('workflow', 'running', 'cancelled', 'cancel'),
    ('workflow', 'waiting_crm', 'running', 'crm_replied'),
    ('workflow', 'waiting_crm', 'failed', 'fail'),
    ('workflow', 'waiting_crm', 'cancelled', 'cancel'),
    ('workflow', 'waiting_retry', 'running', 'retry_due'),
    ('workflow', 'waiting_retry', 'failed', 'fail'),
    ('workflow', 'waiting_retry', 'cancelled', 'cancel'),
    ('workflow', 'waiting_manual', 'running', 'manual_resume'),
    ('workflow', 'waiting_manual', 'failed', 'fail'),
    ('workflow', 'waiting_manual', 'cancelled', 'cancel'),
    -- bitrix_sync.crm_commands (§7.2)
    ('command', 'pending', 'leased', 'claim'),
    ('command', 'pending', 'dead_letter', 'abandon'),
    ('command', 'leased', 'in_flight', 'send'),
    ('command', 'leased', 'pending', 'release'),
    ('command', 'leased', 'retry_wait', 'retry'),
    ('command', 'leased', 'dead_letter', 'dead_letter'),
    ('command', 'in_flight', 'succeeded', 'complete'),
    ('command', 'in_flight', 'retry_wait', 'retry'),
    ('command', 'in_flight', 'uncertain', 'no_reply'),
    ('command', 'in_flight', 'dead_letter', 'dead_letter'),
    ('command', 'retry_wait', 'pending', 'due'),
    ('command', 'retry_wait', 'dead_letter', 'abandon'),
    ('command', 'uncertain', 'reconcile', 'reconcile'),
    ('command', 'reconcile', 'succeeded', 'complete'),
    ('command', 'reconcile', 'retry_wait', 'retry'),
    ('command', 'reconcile', 'dead_letter', 'dead_letter'),
    -- bitrix_sync.webhook_inbox (§7.3)
    ('webhook', 'received', 'coalesced', 'coalesce'),
    ('webhook', 'received', 'processing', 'claim'),
    ('webhook', 'retry_wait', 'processing', 'claim'),
    ('webhook', 'processing', 'processed', 'complete'),
    ('webhook', 'processing', 'retry_wait', 'retry'),
    ('webhook', 'processing', 'dead_letter', 'dead_letter'),
    ('webhook', 'coalesced', 'processed', 'covered'),
    -- bitrix_sync.entity_external_mapping (§6.3)
    ('mapping', 'active', 'closed', 'close'),
    ('mapping', 'active', 'broken', 'mark_broken'),
    -- bitrix_sync.business_alerts (§11)
    ('alert', 'open', 'resolved', 'resolve'),
    ('alert', 'open', 'closed', 'close'),
    ('alert', 'open', 'remote_missing', 'remote_missing'),
    -- bitrix_sync.rebind_requests (§5.4)
    ('rebind', 'requested', 'in_progress', 'start'),
    ('rebind', 'requested', 'cancelled', 'cancel'),
    ('rebind', 'requested', 'failed', 'fail'),
    ('rebind', 'in_progress', 'succeeded', 'succeed'),
    ('rebind', 'in_progress', 'failed', 'fail'),
    -- bitrix_sync.settings_versions (§12.3)
    ('settings', 'draft', 'validated', 'validate'),
    ('settings', 'draft', 'rejected', 'validate'),
    ('settings', 'validated', 'active', 'activate'),
    ('settings', 'active', 'superseded', 'supersede')
  ) as e(machine, from_state, to_state, event);
comment on view bitrix_sync.state_edges is
  'Every legal state transition of every machine, named by its event. The guard triggers and docs/state-machines.md follow this list.';

create or replace function bitrix_sync.tg__guard_transition() returns trigger
language plpgsql as $$
-- TG_ARGV[0]: machine name in state_edges; TG_ARGV[1]: the state column.
declare
  v_from text := to_jsonb(old) ->> tg_argv[1];
  v_to text := to_jsonb(new) ->> tg_argv[1];
begin
  if v_from is distinct from v_to
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = v_from and e.to_state = v_to) then
    raise exception 'illegal % transition % -> %', tg_argv[0], v_from, v_to
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg__guard_transition() is
  'BEFORE UPDATE guard: refuses a change of the state column (TG_ARGV[1]) that is not an edge of machine TG_ARGV[0] in bitrix_sync.state_edges. SQLSTATE BS002.';

create or replace function bitrix_sync.tg__forbid_delete() returns trigger
language plpgsql as $$
begin
  raise exception 'rows of %.% are history and are never deleted', tg_table_schema, tg_table_name
    using errcode = 'BS003',
          hint = 'Close or supersede the row through its bitrix_sync function instead.';
end $$;
comment on function bitrix_sync.tg__forbid_delete() is
  'BEFORE DELETE guard for history tables (mapping, settings versions, rebind requests). SQLSTATE BS003.';

-- Guards and updated_at stamps, one per table. drop/create keeps this file re-runnable.
drop trigger if exists _100_guard_status on han_app.sync_queue;
create trigger _100_guard_status before update of status on han_app.sync_queue
  for each row execute function bitrix_sync.tg__guard_transition('sync_queue', 'status');
comment on trigger _100_guard_status on han_app.sync_queue is 'Refuses illegal queue status changes (bitrix_sync.state_edges).';

drop trigger if exists _100_guard_state on bitrix_sync.workflow_instances;
create trigger _100_guard_state before update of state on bitrix_sync.workflow_instances
  for each row execute function bitrix_sync.tg__guard_transition('workflow', 'state');
comment on trigger _100_guard_state on bitrix_sync.workflow_instances is 'Refuses illegal workflow state changes (§7.1).';

drop trigger if exists _100_guard_status on bitrix_sync.crm_commands;
create trigger _100_guard_status before update of status on bitrix_sync.crm_commands
  for each row execute function bitrix_sync.tg__guard_transition('command', 'status');
comment on trigger _100_guard_status on bitrix_sync.crm_commands is 'Refuses illegal command status changes (§7.2).';

drop trigger if exists _100_guard_status on bitrix_sync.webhook_inbox;
create trigger _100_guard_status before update of status on bitrix_sync.webhook_inbox
  for each row execute function bitrix_sync.tg__guard_transition('webhook', 'status');
comment on trigger _100_guard_status on bitrix_sync.webhook_inbox is 'Refuses illegal webhook status changes (§7.3).';

drop trigger if exists _100_guard_status on bitrix_sync.entity_external_mapping;
create trigger _100_guard_status before update of status on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__guard_transition('mapping', 'status');
comment on trigger _100_guard_status on bitrix_sync.entity_external_mapping is 'closed and broken mappings are final.';

drop trigger if exists _100_guard_status on bitrix_sync.business_alerts;
create trigger _100_guard_status before update of status on bitrix_sync.business_alerts
  for each row execute function bitrix_sync.tg__guard_transition('alert', 'status');
comment on trigger _100_guard_status on bitrix_sync.business_alerts is 'Only open alerts change status.';

drop trigger if exists _100_guard_status on bitrix_sync.rebind_requests;
create trigger _100_guard_status before update of status on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__guard_transition('rebind', 'status');
comment on trigger _100_guard_status on bitrix_sync.rebind_requests is 'Refuses illegal rebind request status changes (§5.4).';

drop trigger if exists _100_guard_status on bitrix_sync.settings_versions;
create trigger _100_guard_status before update of status on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__guard_transition('settings', 'status');
comment on trigger _100_guard_status on bitrix_sync.settings_versions is 'Only validated versions become active (§12.3).';

drop trigger if exists _200_forbid_delete on bitrix_sync.entity_external_mapping;
create trigger _200_forbid_delete before delete on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.entity_external_mapping is 'Mapping history is never deleted (§4).';

drop trigger if exists _200_forbid_delete on bitrix_sync.settings_versions;
create trigger _200_forbid_delete before delete on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.settings_versions is 'Settings audit is never deleted.';

drop trigger if exists _200_forbid_delete on bitrix_sync.rebind_requests;
create trigger _200_forbid_delete before delete on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.rebind_requests is 'Rebind audit is never deleted.';

do $$
declare
  v_table text;
begin
  foreach v_table in array array['entity_external_mapping', 'workflow_instances', 'crm_commands', 'business_alerts',
                                 'rebind_requests', 'contact_snapshots', 'reconciliation_cursors']
  loop
    execute format('drop trigger if exists _900_set_updated_at on bitrix_sync.%I', v_table);
    execute format('create trigger _900_set_updated_at before update on bitrix_sync.%I
                      for each row execute function bitrix_sync.tg__set_updated_at()', v_table);
    execute format('comment on trigger _900_set_updated_at on bitrix_sync.%I is %L', v_table,
                   'Stamps updated_at on every change.');
  end loop;
end $$;
-- <<< sql/state_machines.sql
-- >>> sql/enqueue.sql (included)
-- Enqueue trigger (§6.2): App changes that matter to the CRM become han_app.sync_queue intents in
-- the App's own transaction, so a rolled-back business update leaves no intent behind.

create or replace function han_app.enqueue_contact_sync() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_new jsonb := to_jsonb(new);
  v_old jsonb;
  v_user_id uuid;
  v_task text;
  v_reason text;
  v_subject text := case tg_table_name when 'user_identity' then 'identity' else 'profile' end;
begin
  -- bitrix-sync writes CRM-master fields with SET LOCAL han.sync_suppress = 'true': no echo.
  if coalesce(current_setting('han.sync_suppress', true), '') = 'true' then
    return null;
  end if;

  -- entity_id is always user_identity.id, also for profile rows.
  v_user_id := case tg_table_name when 'user_identity' then (v_new ->> 'id')::uuid
                                  else (v_new ->> 'user_id')::uuid end;

  if tg_op = 'INSERT' then
    if v_new ->> 'record_status' = 'active' then
      v_task := 'contact.map_or_create';
      v_reason := v_subject || '_created';
    end if;
  else
    v_old := to_jsonb(old);
    if v_old ->> 'record_status' = 'active' and v_new ->> 'record_status' <> 'active' then
      v_task := 'contact.deactivate';
      v_reason := v_subject || '_deactivated';
    elsif v_old ->> 'record_status' <> 'active' and v_new ->> 'record_status' = 'active' then
      v_task := 'contact.map_or_create';
      v_reason := v_subject || '_reactivated';
    elsif tg_table_name = 'user_identity'
          and v_new ->> 'record_status' = 'active'
          and (v_new ->> 'phone_number') is distinct from (v_old ->> 'phone_number') then
      v_task := 'contact.update';
      v_reason := 'identity_phone_changed';
    end if;
    -- Anything else (CRM-master fields, foreign_phone, timestamps, no-op updates) creates nothing.
  end if;

  if v_task is null then
    return null;
  end if;

  -- One active row per (task, user): a newer intent coalesces into it. If a worker holds the row,
  -- the newer intent takes it back to pending, which fences the holder: its completion is refused
  -- and the row is processed again with the newest state.
  insert into han_app.sync_queue as q (task_type, entity_type, entity_id, dedup_key, payload_json, status, next_attempt_at)
  values (v_task, 'user', v_user_id, v_task || ':user:' || v_user_id::text,
          jsonb_build_object(
            'schema_version', 1,
            'user_id', v_user_id,
            'reason', v_reason,
            'source_updated_at', to_char((v_new ->> 'updated_at')::timestamptz at time zone 'UTC',
                                         'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
          'pending', now())
  on conflict (dedup_key) where status in ('pending', 'leased', 'retry_wait')
  do update set payload_json = excluded.payload_json,
                status = 'pending',
                next_attempt_at = least(q.next_attempt_at, now()),
                locked_by = null,
                locked_until = null,
                lease_token = null,
                updated_at = now();

  -- Wake-up only; workers also poll (§8). The payload names no user.
  perform pg_notify('bitrix_sync_queue', v_task);
  return null;
end $$;
comment on function han_app.enqueue_contact_sync() is
  'AFTER INSERT/UPDATE trigger on user_identity and client_profile (§6.2): active insert or return to active -> contact.map_or_create; leaving active -> contact.deactivate; phone change -> contact.update. Skips when han.sync_suppress = ''true'' and on changes of untracked or CRM-master fields. Coalesces per (task, user) and NOTIFYs bitrix_sync_queue.';

drop trigger if exists _500_enqueue_contact_sync on han_app.user_identity;
create trigger _500_enqueue_contact_sync
  after insert or update of phone_number, record_status on han_app.user_identity
  for each row execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync on han_app.user_identity is
  'Records contact.map_or_create / contact.update / contact.deactivate intents (§6.2).';

drop trigger if exists _500_enqueue_contact_sync on han_app.client_profile;
create trigger _500_enqueue_contact_sync
  after insert or update of record_status on han_app.client_profile
  for each row execute function han_app.enqueue_contact_sync();
comment on trigger _500_enqueue_contact_sync on han_app.client_profile is
  'Records contact.map_or_create / contact.deactivate intents when the profile status changes (§6.2).';
-- <<< sql/enqueue.sql
-- >>> sql/queue.sql (included)
-- Leases on han_app.sync_queue (§6.1): short claim transactions with FOR UPDATE SKIP LOCKED, a new
-- lease token on every claim, and completion only under the current token (fencing).

create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable as $$
begin
  if p_code is null or p_code !~ '^[a-z0-9][a-z0-9_.]{0,63}$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
comment on function bitrix_sync._check_code(text) is
  'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';

create or replace function bitrix_sync._refuse_stale(p_what text, p_id text) returns void
language plpgsql as $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;
comment on function bitrix_sync._refuse_stale(text, text) is
  'Raises BS001 for a completion that does not present the current lease token (a stale holder).';

create or replace function bitrix_sync.claim_sync_tasks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof han_app.sync_queue
language plpgsql as $$
declare
  v_watermark timestamptz;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- After cutover only intents recorded since the watermark are processed (§17 step 8).
  select c.cutover_watermark into v_watermark from bitrix_sync.cutover c;
  return query
  with due as (
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
     where q.status in ('pending', 'retry_wait') and q.next_attempt_at <= now()
       and q.created_at >= coalesce(v_watermark, '-infinity'::timestamptz)
     order by q.next_attempt_at, q.created_at
     limit p_limit
     for update skip locked
  ), expired as (
    select q.id, q.locked_until as sort_at from han_app.sync_queue q
     where q.status = 'leased' and q.locked_until < now()
     order by q.locked_until
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) c order by sort_at limit p_limit
  )
  update han_app.sync_queue q
     set status = 'leased',
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         lease_token = gen_random_uuid(),
         attempt_count = q.attempt_count + 1,
         updated_at = now()
    from picked
   where q.id = picked.id
  returning q.*;
end $$;
comment on function bitrix_sync.claim_sync_tasks(text, integer, interval) is
  'Claims up to p_limit due intents (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED; each gets a new lease_token. Two claimers never get the same row.';

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue set locked_until = now() + p_lease, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_sync_task_lease(uuid, uuid, interval) is
  'Extends a held lease. Refuses a stale token (BS001).';

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_sync_task(uuid, uuid) is
  'leased -> processed under the current lease token; a stale holder is refused (BS001).';

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'pending', locked_by = null, locked_until = null, lease_token = null,
         attempt_count = greatest(attempt_count - 1, 0), updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_sync_task(uuid, uuid) is
  'leased -> pending without spending an attempt (shutdown, paused sync). Refuses a stale token (BS001).';

create or replace function bitrix_sync.retry_sync_task(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  update han_app.sync_queue
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.retry_sync_task(uuid, uuid, text, interval) is
  'leased -> retry_wait after p_delay with a safe error code. Refuses a stale token (BS001).';

create or replace function bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  insert into bitrix_sync.technical_dead_letters (source, source_id, operation, error_code, attempt_count, first_attempt_at)
  values ('sync_queue', v_row.id::text, v_row.task_type, p_error_code, v_row.attempt_count, v_row.created_at);
  return v_row;
end $$;
comment on function bitrix_sync.dead_letter_sync_task(uuid, uuid, text) is
  'leased -> dead_letter and a technical_dead_letters row with the safe code. Refuses a stale token (BS001).';

create or replace function bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_reason);
  update han_app.sync_queue
     set status = 'cancelled', cancel_reason = p_reason, completed_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.cancel_sync_task(uuid, uuid, text) is
  'leased -> cancelled with a reason code (e.g. user not eligible). Refuses a stale token (BS001).';
-- <<< sql/queue.sql
-- >>> sql/workflows.sql (included)
-- Workflows (§7.1): one active workflow per user; persisted transitions by event name, fenced by
-- the lease token of the worker stepping the workflow.

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text
) returns table (workflow_id uuid, action text)
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash)
      returning * into v_row;
    exception when unique_violation then
      -- Two intents of one user claimed at once: the other call started the workflow first and has
      -- committed by now (the index waited for it), so look again and join it.
      if v_try = 3 then
        raise;
      end if;
      continue;
    end;
    perform pg_notify('bitrix_sync_workflows', '');
    return query select v_row.id, 'started'::text;
    return;
  end loop;
end $$;
comment on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text) is
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged).';

create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.workflow_instances
language plpgsql as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  return query
  with picked as (
    select w.id from bitrix_sync.workflow_instances w
     where w.state in ('created', 'running', 'waiting_retry')
       and w.next_attempt_at <= now()
       and (w.lease_token is null or w.locked_until < now())
     order by w.next_attempt_at, w.created_at
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.workflow_instances w
     set state = 'running',
         lease_token = gen_random_uuid(),
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         attempt_count = w.attempt_count + 1
    from picked
   where w.id = picked.id
  returning w.*;
end $$;
comment on function bitrix_sync.claim_workflows(text, integer, interval) is
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due).';

create or replace function bitrix_sync.fire_workflow_event(
  p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb default '{}'::jsonb
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_to text;
  v_bad text;
begin
  select * into v_row from bitrix_sync.workflow_instances where id = p_id for update;
  if not found then
    raise exception 'workflow % does not exist', p_id
      using errcode = 'BS005', hint = 'Check the workflow id.';
  end if;
  if v_row.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  select e.to_state into v_to from bitrix_sync.state_edges e
   where e.machine = 'workflow' and e.from_state = v_row.state and e.event = p_event;
  if v_to is null then
    raise exception 'workflow event % is not allowed in state %', p_event, v_row.state
      using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
  end if;
  select string_agg(k, ', ') into v_bad from jsonb_object_keys(coalesce(p_changes, '{}'::jsonb)) k
   where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                   'processed_revision');
  if v_bad is not null then
    raise exception 'workflow event cannot change %', v_bad
      using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
  end if;
  if p_changes ? 'last_error_code' and p_changes ->> 'last_error_code' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'last_error_code');
  end if;
  if p_changes ? 'outcome' and p_changes ->> 'outcome' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'outcome');
  end if;

  update bitrix_sync.workflow_instances w
     set state = v_to,
         current_step = coalesce(p_changes ->> 'current_step', w.current_step),
         step_data = case when p_changes ? 'step_data' then p_changes -> 'step_data' else w.step_data end,
         contact_id = case when p_changes ? 'contact_id' then p_changes ->> 'contact_id' else w.contact_id end,
         outcome = case when p_changes ? 'outcome' then p_changes ->> 'outcome' else w.outcome end,
         last_error_code = case when p_changes ? 'last_error_code' then p_changes ->> 'last_error_code' else w.last_error_code end,
         next_attempt_at = coalesce((p_changes ->> 'next_attempt_at')::timestamptz,
                                    case when v_to = 'running' then w.next_attempt_at else now() end),
         processed_revision = coalesce((p_changes ->> 'processed_revision')::integer, w.processed_revision),
         -- The lease belongs to a worker stepping a running workflow; any other state releases it.
         lease_token = case when v_to = 'running' then w.lease_token end,
         locked_by = case when v_to = 'running' then w.locked_by end,
         locked_until = case when v_to = 'running' then w.locked_until end,
         finished_at = case when v_to in ('succeeded', 'failed', 'cancelled') then now() end
   where w.id = p_id
  returning * into v_row;
  if v_to in ('waiting_retry', 'running') then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fire_workflow_event(uuid, uuid, text, jsonb) is
  'Moves a workflow along the edge named p_event from its current state (bitrix_sync.state_edges), applying the allowed changes. The caller must present the current lease token (null when none is held); stale holders get BS001, illegal events BS002.';

create or replace function bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_workflow_lease(uuid, uuid, interval) is
  'Extends the lease of a running workflow. Refuses a stale token (BS001).';
-- <<< sql/workflows.sql
-- >>> sql/commands.sql (included)
-- CRM commands (§7.2, §8, §9): issued by a workflow step, claimed by the pump under a lease,
-- marked in_flight (the durable "send started" marker) before the HTTP batch leaves, and completed
-- per sub-result. A write with no reply becomes uncertain and is never resent blindly.

create or replace function bitrix_sync._is_write_command(p_command_type text) returns boolean
language sql immutable parallel safe as $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;
comment on function bitrix_sync._is_write_command(text) is
  'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';

create or replace function bitrix_sync._wake_workflow(p_workflow_id uuid) returns void
language plpgsql as $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now()
   where id = p_workflow_id and state = 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync._wake_workflow(uuid) is
  'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  select * into v_wf from bitrix_sync.workflow_instances where id = p_workflow_id for update;
  if not found or v_wf.state <> 'running' or v_wf.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id)
  returning * into v_cmd;
  perform bitrix_sync.fire_workflow_event(p_workflow_id, p_lease_token, 'await_crm',
                                          jsonb_build_object('current_step', p_step));
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm at step p_step. The unique index allows one active command per workflow.';

create or replace function bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_cmd bitrix_sync.crm_commands;
begin
  if p_command_type not like 'alert.%' then
    raise exception 'alert commands must be alert.* types, got %', p_command_type
      using errcode = 'BS004', hint = 'Contact commands belong to a workflow: use issue_command().';
  end if;
  insert into bitrix_sync.crm_commands (alert_id, command_type, params)
  values (p_alert_id, p_command_type, coalesce(p_params, '{}'::jsonb))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_alert_command(bigint, text, jsonb) is
  'Queues a smart-process command for a business alert; independent of workflow steps (§7.1).';

create or replace function bitrix_sync.claim_commands(
  p_worker text, p_limit integer default 20, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row record;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the batch.size and lease.ttl_sec settings.';
  end if;

  -- A holder that died with a request out: a write may have landed (uncertain), a read is retried.
  for v_row in
    select c.id, c.command_type, c.workflow_id from bitrix_sync.crm_commands c
     where c.status = 'in_flight' and c.locked_until < now()
     for update skip locked
  loop
    if bitrix_sync._is_write_command(v_row.command_type) then
      update bitrix_sync.crm_commands
         set status = 'uncertain', lease_token = null, locked_by = null, locked_until = null,
             last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
      if v_row.workflow_id is not null then
        perform bitrix_sync._wake_workflow(v_row.workflow_id);
      end if;
    else
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(), lease_token = null, locked_by = null,
             locked_until = null, last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
    end if;
  end loop;

  -- retry_wait -> pending (due), then claim pending and expired leased rows.
  update bitrix_sync.crm_commands c set status = 'pending'
   where c.id in (select d.id from bitrix_sync.crm_commands d
                   where d.status = 'retry_wait' and d.next_attempt_at <= now()
                   for update skip locked);

  return query
  with due as (
    select c.id, c.next_attempt_at as sort_at from bitrix_sync.crm_commands c
     where c.status = 'pending' and c.next_attempt_at <= now()
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  ), expired as (
    select c.id, c.locked_until as sort_at from bitrix_sync.crm_commands c
     where c.status = 'leased' and c.locked_until < now()
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) x order by sort_at limit p_limit
  )
  update bitrix_sync.crm_commands c
     set status = 'leased', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
         locked_until = now() + p_lease
    from picked
   where c.id = picked.id
  returning c.*;
end $$;
comment on function bitrix_sync.claim_commands(text, integer, interval) is
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait.';

create or replace function bitrix_sync.send_commands(
  p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_horizon interval default interval '24 hours'
) returns setof bigint
language plpgsql as $$
begin
  if coalesce(array_length(p_ids, 1), 0) <> coalesce(array_length(p_lease_tokens, 1), 0) then
    raise exception 'send_commands needs one lease token per command id'
      using errcode = 'BS004', hint = 'Pass the ids and tokens returned by claim_commands(), in the same order.';
  end if;
  return query
  update bitrix_sync.crm_commands c
     set status = 'in_flight', sent_at = now(), batch_id = p_batch_id, attempt_count = c.attempt_count + 1,
         deadline_at = case when c.attempt_count = 0 and c.limit_hits = 0 then now() + p_horizon else c.deadline_at end
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where c.id = t.id and c.status = 'leased' and c.lease_token = t.token
  returning c.id;
end $$;
comment on function bitrix_sync.send_commands(bigint[], uuid[], uuid, interval) is
  'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The retry horizon starts at the first send.';

create or replace function bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_command(bigint, uuid, jsonb) is
  'in_flight -> succeeded with a safe response projection, and wakes the workflow. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.release_command(p_id bigint, p_lease_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'pending', lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_command(bigint, uuid) is
  'leased -> pending without sending (no limiter token, method blocked, shutdown). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._check_bitrix_error(p_error text) returns void
language plpgsql immutable as $$
begin
  -- Bitrix24 error codes are identifiers (QUERY_LIMIT_EXCEEDED, ERROR_CORE, expired_token); the
  -- error_description next to them may quote field values, so only the identifier is kept (§9).
  if p_error is not null and p_error !~ '^[A-Za-z][A-Za-z0-9_]{0,63}$' then
    raise exception 'bitrix error must be the Bitrix24 error code (an identifier of at most 64 characters)'
      using errcode = 'BS004',
            hint = 'Pass the reply''s "error" field, e.g. QUERY_LIMIT_EXCEEDED, never error_description or raw text.';
  end if;
end $$;
comment on function bitrix_sync._check_bitrix_error(text) is
  'Refuses anything but a Bitrix24 error code identifier (null allowed), so raw reply text never reaches crm_commands or technical_dead_letters. SQLSTATE BS004.';

create or replace function bitrix_sync._dead_letter_command_row(
  p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
          p_http_status, left(p_bitrix_error, 64), v_row.attempt_count - v_row.limit_hits,
          v_row.deadline_at - interval '24 hours', v_row.deadline_at, v_row.correlation_id);
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands, text, integer, text) is
  'Internal: moves a held command to dead_letter, writes the technical DLQ row and wakes its workflow.';

create or replace function bitrix_sync.retry_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean default true,
  p_http_status integer default null, p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- 24 h horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  if now() + greatest(p_delay, interval '0') > v_row.deadline_at then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
  end if;
  update bitrix_sync.crm_commands c
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_http_status = p_http_status,
         last_bitrix_error = left(p_bitrix_error, 64),
         -- QUERY_LIMIT_EXCEEDED is refused before execution: it is not an attempt (§9).
         limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
         lease_token = null, locked_by = null, locked_until = null
   where c.id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_command(bigint, uuid, text, interval, boolean, integer, text) is
  'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). Past the 24 h horizon it dead-letters instead. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.mark_command_uncertain(bigint, uuid, text) is
  'in_flight -> uncertain: the request left and no reply came. The workflow recovers by searching, never by resending. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer default null,
  p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return bitrix_sync._dead_letter_command_row(v_row, p_error_code, p_http_status, p_bitrix_error);
end $$;
comment on function bitrix_sync.dead_letter_command(bigint, uuid, text, integer, text) is
  'leased|in_flight -> dead_letter with a technical DLQ row (permanent failure). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state = 'running' and w.lease_token = p_workflow_token
   for update of c;
  if not found then
    perform bitrix_sync._refuse_stale('workflow of command', p_command_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._workflow_holder(bigint, uuid) is
  'Internal: the command, locked, when the caller holds its workflow''s lease; otherwise BS001.';

create or replace function bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.begin_command_reconcile(bigint, uuid) is
  'uncertain -> reconcile: the workflow (holding its lease) starts the recovery search for an unanswered write.';

create or replace function bitrix_sync.resolve_command_reconcile(
  p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb default null,
  p_error_code text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  if v_row.status <> 'reconcile' then
    raise exception 'command % is %, not reconcile', p_id, v_row.status
      using errcode = 'BS002', hint = 'Call begin_command_reconcile() first.';
  end if;
  case p_outcome
    when 'succeeded' then
      update bitrix_sync.crm_commands
         set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null
       where id = p_id returning * into v_row;
    when 'retry' then
      -- The search proved the write did not land: sending it again cannot duplicate anything.
      perform bitrix_sync._check_code(coalesce(p_error_code, 'reconciled_not_applied'));
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      insert into bitrix_sync.technical_dead_letters
        (source, source_id, workflow_id, command_id, operation, error_code, attempt_count, deadline_at, correlation_id)
      values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
              v_row.attempt_count - v_row.limit_hits, v_row.deadline_at, v_row.correlation_id);
    else
      raise exception 'reconcile outcome must be succeeded, retry or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied) or dead_letter. Fenced by the workflow lease.';

create or replace function bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.reject_command(bigint, uuid, text) is
  'leased|in_flight -> dead_letter for a business failure (invalid phone, unknown citizenship): no technical DLQ row; the workflow wakes, parks in waiting_manual and raises a business alert (§9). Refuses stale tokens (BS001).';
-- <<< sql/commands.sql
-- >>> sql/webhooks.sql (included)
-- Webhook inbox (§7.3, §10.1): the receiver records an event durably and answers; processing
-- claims one event per entity and coalesces the other pending events of that entity into it, so
-- one CRM read covers them. The partial unique index below is the guarantee that one entity is
-- never processed by two workers at once.

create unique index if not exists webhook_inbox_one_processing_per_entity_uq
  on bitrix_sync.webhook_inbox (receiver, entity_id) where status = 'processing';
comment on index bitrix_sync.webhook_inbox_one_processing_per_entity_uq is
  'At most one event of an entity is being processed at any time, whichever worker holds it.';

create or replace function bitrix_sync.record_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null,
  p_event_id text default null, p_source_ts timestamptz default null
) returns bigint
language plpgsql as $$
declare
  v_id bigint;
begin
  insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, event_id, source_ts)
  values (p_receiver, p_entity_type_id, p_entity_id, p_source_ip, p_event_id, p_source_ts)
  on conflict (receiver, event_id) where event_id is not null do nothing
  returning id into v_id;
  perform pg_notify('bitrix_sync_webhooks', p_receiver);
  return v_id;
end $$;
comment on function bitrix_sync.record_webhook(text, integer, text, inet, text, timestamptz) is
  'Durable insert of an accepted webhook (status received). With a stable event_id a duplicate is dropped and null is returned.';

create or replace function bitrix_sync.claim_webhooks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds',
  p_receiver text default null
) returns setof bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_cand record;
  v_row bitrix_sync.webhook_inbox;
  v_claimed integer := 0;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  for v_cand in
    select w.id, w.receiver, w.entity_id, w.status from bitrix_sync.webhook_inbox w
     where (p_receiver is null or w.receiver = p_receiver)
       and ((w.status in ('received', 'retry_wait') and w.next_attempt_at <= now())
            or (w.status = 'processing' and w.locked_until < now()))
     order by w.id
     limit p_limit * 4
     for update skip locked
  loop
    exit when v_claimed >= p_limit;
    -- Another claimer that has an event of this entity in flight holds this lock until it commits.
    -- Skipping instead of waiting on its uncommitted index entry avoids a lock cycle between two
    -- claimers that picked events of the same two entities in crossed order (a deadlock error).
    continue when not pg_try_advisory_xact_lock(hashtext('bitrix_sync.webhook_inbox'),
                                                hashtext(v_cand.receiver || ':' || v_cand.entity_id));
    begin
      -- The status test skips candidates this loop has just coalesced into an earlier one.
      update bitrix_sync.webhook_inbox
         set status = 'processing', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
             locked_until = now() + p_lease, attempt_count = attempt_count + 1, status_at = now()
       where id = v_cand.id and status = v_cand.status
      returning * into v_row;
    exception when unique_violation then
      -- Another event of this entity is being processed: leave this one for later.
      continue;
    end;
    continue when not found;
    -- The other pending events of the entity are covered by this one read.
    update bitrix_sync.webhook_inbox o
       set status = 'coalesced', coalesced_into = v_row.id, status_at = now()
     where o.receiver = v_row.receiver and o.entity_id = v_row.entity_id and o.status = 'received'
       and o.id <> v_row.id
       and o.id in (select x.id from bitrix_sync.webhook_inbox x
                     where x.receiver = v_row.receiver and x.entity_id = v_row.entity_id and x.status = 'received'
                     for update skip locked);
    v_claimed := v_claimed + 1;
    return next v_row;
  end loop;
end $$;
comment on function bitrix_sync.claim_webhooks(text, integer, interval, text) is
  'Leases due inbox events, at most one per entity (enforced by a partial unique index), and coalesces the entity''s other received events into the claimed one.';

create or replace function bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_outcome);
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = p_outcome, processed_at = now(), status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'processing' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced', processed_at = now(), status_at = now()
   where coalesced_into = p_id and status = 'coalesced';
  return v_row;
end $$;
comment on function bitrix_sync.complete_webhook(bigint, uuid, text) is
  'processing -> processed with a safe outcome code; the events coalesced into it are processed too. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.webhook_inbox
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'processing' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.retry_webhook(bigint, uuid, text, interval) is
  'processing -> retry_wait. Coalesced events stay attached and finish with it. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.webhook_inbox
     set status = 'dead_letter', last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'processing' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced_into_dead_letter', processed_at = now(), status_at = now()
   where coalesced_into = p_id and status = 'coalesced';
  insert into bitrix_sync.technical_dead_letters (source, source_id, operation, error_code, attempt_count, first_attempt_at)
  values ('webhook', v_row.id::text, 'webhook.' || v_row.receiver, p_error_code, v_row.attempt_count, v_row.received_at);
  return v_row;
end $$;
comment on function bitrix_sync.dead_letter_webhook(bigint, uuid, text) is
  'processing -> dead_letter with a technical DLQ row. Reconciliation still repairs the Contact later. Refuses stale tokens (BS001).';
-- <<< sql/webhooks.sql
-- >>> sql/mapping.sql (included)
-- The canonical user <-> Contact mapping (§4, §6.3). Only these functions write it; history rows
-- are never deleted (trigger) and closed/broken rows are final (guard trigger).

create or replace function bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid)
returns bitrix_sync.entity_external_mapping
language plpgsql as $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  insert into bitrix_sync.entity_external_mapping (entity_id, external_id, workflow_id)
  values (p_user_id, p_contact_id, p_workflow_id)
  returning * into v_row;
  return v_row;
exception
  when unique_violation then
    raise exception 'cannot link user to Contact %: the user or the Contact already has an active link', p_contact_id
      using errcode = 'BS006',
            hint = 'Close the existing active mapping first (close_mapping), or use request_bitrix_contact_rebind().';
end $$;
comment on function bitrix_sync.open_mapping(uuid, text, uuid) is
  'Creates the active link of a user to a Contact. Refuses a second active link for either side (BS006).';

create or replace function bitrix_sync.close_mapping(
  p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean default false
) returns bitrix_sync.entity_external_mapping
language plpgsql as $$
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

create or replace function bitrix_sync.active_mapping_for_user(p_user_id uuid)
returns bitrix_sync.entity_external_mapping
language sql stable as $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and entity_type = 'user' and entity_id = p_user_id and status = 'active'
$$;
comment on function bitrix_sync.active_mapping_for_user(uuid) is 'The user''s active Contact link, or null.';

create or replace function bitrix_sync.active_mapping_for_contact(p_contact_id text)
returns bitrix_sync.entity_external_mapping
language sql stable as $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and external_entity_type = 'contact' and external_id = p_contact_id
     and status = 'active'
$$;
comment on function bitrix_sync.active_mapping_for_contact(text) is 'The Contact''s active user link, or null.';
-- <<< sql/mapping.sql
-- >>> sql/rebind.sql (included)
-- Audited rebind request (§5.4): an admin asks to move a user's link to another Contact. The
-- procedure records the request and starts a contact.rebind workflow; the mapping itself changes
-- only when the workflow has updated both Contacts.

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
  insert into bitrix_sync.rebind_requests (user_id, previous_contact_id, target_contact_id, reason, operator_id, workflow_id)
  values (v_user_id, v_current.external_id, v_target, btrim(reason), btrim(operator_id), v_workflow_id)
  returning id into v_request_id;
  perform pg_notify('bitrix_sync_workflows', '');
  return v_request_id;
end $$;
comment on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) is
  'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user, records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';
-- <<< sql/rebind.sql
-- >>> sql/alerts.sql (included)
-- Business alerts (§11): one open alert per (type, fingerprint); a repeat bumps occurrence_count;
-- after a terminal stage a new case opens a new alert linked to the previous one.

create or replace function bitrix_sync.raise_business_alert(
  p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid,
  p_current_contact_id text default null, p_selected_contact_id text default null,
  p_candidate_contact_ids jsonb default '[]'::jsonb, p_details jsonb default '{}'::jsonb,
  p_correlation_id uuid default null
) returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
  v_previous bigint;
begin
  perform bitrix_sync._check_code(p_alert_type);
  update bitrix_sync.business_alerts a
     set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(),
         current_contact_id = coalesce(p_current_contact_id, a.current_contact_id),
         selected_contact_id = coalesce(p_selected_contact_id, a.selected_contact_id),
         candidate_contact_ids = coalesce(p_candidate_contact_ids, a.candidate_contact_ids),
         details = coalesce(p_details, a.details),
         correlation_id = coalesce(p_correlation_id, a.correlation_id),
         crm_sync_status = 'pending'
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select max(a.id) into v_previous from bitrix_sync.business_alerts a
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint;
  insert into bitrix_sync.business_alerts
    (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id,
     candidate_contact_ids, details, previous_alert_id, correlation_id)
  values (p_alert_type, p_severity, p_fingerprint, p_user_id, p_current_contact_id, p_selected_contact_id,
          coalesce(p_candidate_contact_ids, '[]'::jsonb), coalesce(p_details, '{}'::jsonb), v_previous, p_correlation_id)
  returning * into v_row;
  return v_row;
exception
  when unique_violation then
    -- A concurrent raise opened it first: count this occurrence on that row.
    update bitrix_sync.business_alerts a
       set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(), crm_sync_status = 'pending'
     where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
    returning * into v_row;
    return v_row;
end $$;
comment on function bitrix_sync.raise_business_alert(text, text, text, uuid, text, text, jsonb, jsonb, uuid) is
  'Opens a business alert or, if one is open for (type, fingerprint), counts another occurrence on it. A new case after a closed one links previous_alert_id. details must already be masked.';

create or replace function bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text)
returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts
     set item_id = coalesce(p_item_id, item_id), stage_id = coalesce(p_stage_id, stage_id)
   where id = p_alert_id
  returning * into v_row;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.record_alert_item(bigint, bigint, text) is
  'Records the smart-process item and stage after a successful add/update/get. crm_sync_status is left alone: a newer occurrence may already have set it back to pending.';

create or replace function bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text default null)
returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  if p_status not in ('resolved', 'closed', 'remote_missing') then
    raise exception 'an alert finishes as resolved, closed or remote_missing, not %', p_status
      using errcode = 'BS004', hint = 'See §11 and §10.3.';
  end if;
  update bitrix_sync.business_alerts
     set status = p_status, stage_id = coalesce(p_stage_id, stage_id), closed_at = now()
   where id = p_alert_id and status = 'open'
  returning * into v_row;
  if not found then
    raise exception 'business alert % is not open', p_alert_id
      using errcode = 'BS002', hint = 'A finished alert stays finished; a new case opens a new alert.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_business_alert(bigint, text, text) is
  'open -> resolved | closed (terminal stage seen) | remote_missing (item deleted in the CRM).';
-- <<< sql/alerts.sql
-- >>> sql/settings.sql (included)
-- Hot settings (§12.3): a typed catalogue, versions with validation status and audit, activation of
-- validated versions only, rollback, and a NOTIFY so workers reload.

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.entity_type_id', 'integer', null, 128, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, null, false, 'Smart-process field names (ufCrm<type>_...) for alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, false, 'Resolution SLA of an alert (one business day by default).'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, true, 'Terminal stage ID: closed without resolution.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, true, 'Stage ID: in progress.'),
  ('alerts.stage_new', 'text', null, null, null, null, true, 'Stage ID for new alerts.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, true, 'Terminal stage ID: resolved.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, false, 'Rows claimed from a queue per round trip.'),
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, false, 'Lease length for queue rows, workflows, commands and webhooks.'),
  ('limiter.burst', 'integer', '5', 1, 250, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).'),
  ('reconcile.contacts_interval_sec', 'integer', '900', 60, 86400, null, false, 'Incremental Contact reconciliation interval (§10.2: 15 min).'),
  ('reconcile.opened_filter', 'enum', '"Y"', null, null, '["Y", "N", "1", "0"]', false, 'Value sent for the opened filter of crm.item.list; the reference documents Y/N for system booleans.'),
  ('reconcile.overlap_sec', 'integer', '120', 0, 3600, null, false, 'Overlap re-read below the watermark.'),
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, false, 'Ops alert when recovered-without-webhook / changed exceeds this share.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, false, 'Ops alert when a run recovers at least this many Contacts without a webhook and more than twice the baseline.'),
  ('retry.base_ms', 'integer', '1000', 10, 600000, null, false, 'Backoff base (full jitter, §9).'),
  ('retry.horizon_sec', 'integer', '86400', 60, 604800, null, false, 'Retry horizon from the first attempt (§9: 24 h).'),
  ('retry.max_ms', 'integer', '300000', 100, 86400000, null, false, 'Backoff cap.'),
  ('worker.poll_interval_ms', 'integer', '2000', 100, 5000, null, false, 'Fallback poll when no NOTIFY arrives (§8: at most 5 s).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, nullable = excluded.nullable,
      description = excluded.description;

create or replace function bitrix_sync._settings_errors(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_def bitrix_sync.settings;
  v_val jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_key text;
  v_num numeric;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return '["values must be a JSON object"]'::jsonb;
  end if;
  for v_key in select k from jsonb_object_keys(p_values) k where k not in (select s.key from bitrix_sync.settings s) loop
    v_errors := v_errors || to_jsonb(format('%s: unknown setting', v_key));
  end loop;
  for v_def in select * from bitrix_sync.settings order by key loop
    v_val := coalesce(p_values -> v_def.key, v_def.default_value, 'null'::jsonb);
    if jsonb_typeof(v_val) = 'null' then
      if not v_def.nullable then
        v_errors := v_errors || to_jsonb(format('%s: a value is required', v_def.key));
      end if;
      continue;
    end if;
    case v_def.value_type
      when 'integer', 'number' then
        if jsonb_typeof(v_val) <> 'number' then
          v_errors := v_errors || to_jsonb(format('%s: must be a number', v_def.key));
          continue;
        end if;
        v_num := (v_val #>> '{}')::numeric;
        if v_def.value_type = 'integer' and v_num <> trunc(v_num) then
          v_errors := v_errors || to_jsonb(format('%s: must be a whole number', v_def.key));
        end if;
        if v_def.min_value is not null and v_num < v_def.min_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at least %s', v_def.key, v_def.min_value));
        end if;
        if v_def.max_value is not null and v_num > v_def.max_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s', v_def.key, v_def.max_value));
        end if;
      when 'text' then
        if jsonb_typeof(v_val) <> 'string' or length(v_val #>> '{}') = 0 then
          v_errors := v_errors || to_jsonb(format('%s: must be a non-empty string', v_def.key));
        end if;
      when 'boolean' then
        if jsonb_typeof(v_val) <> 'boolean' then
          v_errors := v_errors || to_jsonb(format('%s: must be true or false', v_def.key));
        end if;
      when 'enum' then
        if not (v_def.allowed_values @> jsonb_build_array(v_val)) then
          v_errors := v_errors || to_jsonb(format('%s: must be one of %s', v_def.key, v_def.allowed_values));
        end if;
      when 'json' then
        if jsonb_typeof(v_val) <> 'object' then
          v_errors := v_errors || to_jsonb(format('%s: must be a JSON object', v_def.key));
        end if;
    end case;
  end loop;
  -- Cross-field rules.
  if coalesce((p_values ->> 'retry.base_ms')::numeric, 1000) > coalesce((p_values ->> 'retry.max_ms')::numeric, 300000) then
    v_errors := v_errors || to_jsonb('retry.base_ms: must not exceed retry.max_ms'::text);
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;
comment on function bitrix_sync._settings_errors(jsonb) is
  'Validation messages for a complete settings object against the catalogue (types, bounds, allowed values, cross-field rules); empty array when valid.';

create or replace function bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text default null)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_base bitrix_sync.settings_versions;
  v_version integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'settings changes need an actor for the audit'
      using errcode = 'BS004', hint = 'Pass who you are, e.g. ''ops:ivanov''.';
  end if;
  if p_changes is null or jsonb_typeof(p_changes) <> 'object' then
    raise exception 'settings changes must be a JSON object of key -> value'
      using errcode = 'BS008', hint = 'Example: ''{"batch.size": 25}''::jsonb';
  end if;
  select * into v_base from bitrix_sync.settings_versions where status = 'active';
  insert into bitrix_sync.settings_versions (settings_values, based_on, note, created_by)
  values (coalesce(v_base.settings_values, '{}'::jsonb) || p_changes, v_base.version, p_note, btrim(p_actor))
  returning version into v_version;
  return v_version;
end $$;
comment on function bitrix_sync.propose_settings(jsonb, text, text) is
  'Creates a draft version: the active values with p_changes applied. Validate, then activate it.';

create or replace function bitrix_sync.validate_settings_version(p_version integer)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
  v_errors jsonb;
begin
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'draft' then
    raise exception 'settings version % is %, only drafts are validated', p_version, v_row.status
      using errcode = 'BS002', hint = 'Propose a new version with propose_settings().';
  end if;
  v_errors := bitrix_sync._settings_errors(v_row.settings_values);
  update bitrix_sync.settings_versions
     set status = case when jsonb_array_length(v_errors) = 0 then 'validated' else 'rejected' end,
         validation_errors = case when jsonb_array_length(v_errors) = 0 then null else v_errors end,
         validated_at = now()
   where version = p_version;
  return v_errors;
end $$;
comment on function bitrix_sync.validate_settings_version(integer) is
  'draft -> validated, or -> rejected with the reasons (returned and stored). A rejected version can never be activated.';

create or replace function bitrix_sync.activate_settings_version(p_version integer, p_actor text)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'activation needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'validated' then
    raise exception 'settings version % is %; only a validated version can be activated', p_version, v_row.status
      using errcode = 'BS008',
            hint = case when v_row.status = 'draft' then 'Run validate_settings_version() first.'
                        when v_row.status = 'rejected' then 'Fix the values listed in validation_errors and propose a new version.'
                        else 'To return to an earlier version use rollback_settings().' end;
  end if;
  -- Revalidate: the catalogue may have changed since validation.
  if jsonb_array_length(bitrix_sync._settings_errors(v_row.settings_values)) > 0 then
    raise exception 'settings version % no longer validates against the catalogue', p_version
      using errcode = 'BS008', hint = 'Propose a new version.';
  end if;
  update bitrix_sync.settings_versions set status = 'superseded', superseded_at = now() where status = 'active';
  update bitrix_sync.settings_versions set status = 'active', activated_by = btrim(p_actor), activated_at = now()
   where version = p_version
  returning * into v_row;
  perform pg_notify('bitrix_sync_settings', v_row.version::text);
  return v_row;
end $$;
comment on function bitrix_sync.activate_settings_version(integer, text) is
  'validated -> active; the previous active version becomes superseded. Records who and when, and NOTIFYs bitrix_sync_settings.';

create or replace function bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text default null)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_old bitrix_sync.settings_versions;
  v_version integer;
  v_errors jsonb;
begin
  select * into v_old from bitrix_sync.settings_versions where version = p_to_version;
  if not found or v_old.status not in ('superseded', 'active') then
    raise exception 'settings version % was never active; rollback returns to a version that was', p_to_version
      using errcode = 'BS008', hint = 'Pick a superseded version from bitrix_sync.settings_versions.';
  end if;
  insert into bitrix_sync.settings_versions (settings_values, based_on, rollback_of, note, created_by)
  values (v_old.settings_values,
          (select version from bitrix_sync.settings_versions where status = 'active'),
          p_to_version, coalesce(p_note, format('rollback to version %s', p_to_version)), coalesce(btrim(p_actor), ''))
  returning version into v_version;
  v_errors := bitrix_sync.validate_settings_version(v_version);
  if jsonb_array_length(v_errors) > 0 then
    raise exception 'version % does not validate against today''s catalogue: %', p_to_version, v_errors
      using errcode = 'BS008', hint = 'Propose corrected values instead of a rollback.';
  end if;
  return bitrix_sync.activate_settings_version(v_version, p_actor);
end $$;
comment on function bitrix_sync.rollback_settings(integer, text, text) is
  'Activates a new version carrying the values of an earlier active version (rollback_of records which); history stays linear.';

create or replace function bitrix_sync.active_settings() returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select jsonb_object_agg(s.key, coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb))
           || jsonb_build_object('_version', v.version)
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   group by v.version
$$;
comment on function bitrix_sync.active_settings() is
  'The active version''s values with catalogue defaults filled in, plus _version. What workers read and cache.';

-- A fresh database starts from the catalogue defaults as version 1.
do $$
declare
  v_version integer;
begin
  if not exists (select 1 from bitrix_sync.settings_versions) then
    v_version := bitrix_sync.propose_settings('{}'::jsonb, 'migration', 'catalogue defaults');
    perform bitrix_sync.validate_settings_version(v_version);
    perform bitrix_sync.activate_settings_version(v_version, 'migration');
  end if;
end $$;
-- <<< sql/settings.sql
-- >>> sql/cutover.sql (included)
-- Cutover from the stub to full sync (§17): one watermark; intents recorded before it that were
-- still waiting are cancelled with reason initial_full_sync_cutover. Running it again changes nothing.

create or replace function bitrix_sync.perform_cutover(p_actor text)
returns table (cutover_watermark timestamptz, cancelled_count integer, already_done boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.cutover;
  v_count integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'cutover needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  -- Serialize concurrent callers; the first one wins, the others see its result.
  perform pg_advisory_xact_lock(hashtext('bitrix_sync.perform_cutover'));
  select * into v_row from bitrix_sync.cutover;
  if found then
    return query select v_row.cutover_watermark, v_row.cancelled_count, true;
    return;
  end if;
  with cancelled as (
    update han_app.sync_queue q
       set status = 'cancelled', cancel_reason = 'initial_full_sync_cutover', completed_at = now(), updated_at = now()
     where q.status in ('pending', 'retry_wait')
       and q.task_type like 'contact.%'
       and q.created_at < now()
    returning 1
  )
  select count(*) into v_count from cancelled;
  insert into bitrix_sync.cutover (cutover_watermark, cancelled_count, performed_by)
  values (now(), v_count, btrim(p_actor))
  returning * into v_row;
  return query select v_row.cutover_watermark, v_row.cancelled_count, false;
end $$;
comment on function bitrix_sync.perform_cutover(text) is
  'Records cutover_watermark (now) and cancels earlier pending/retry_wait contact intents with cancel_reason initial_full_sync_cutover (§17 steps 3-4). Idempotent: a second call returns the first result and changes nothing.';
-- <<< sql/cutover.sql
-- >>> sql/status.sql (included)
-- Status views (§14): counts and ages only, never PII, Contact/user IDs or raw errors. Readable by
-- bitrix_sync_admin and used by GET /internal/sync/v1/status.

create or replace view bitrix_sync.status_queue as
select q.status, count(*)::bigint as count,
       extract(epoch from now() - min(q.created_at))::bigint as oldest_age_sec
  from han_app.sync_queue q
 group by q.status;
comment on view bitrix_sync.status_queue is 'han_app.sync_queue depth and oldest age by status.';

create or replace view bitrix_sync.status_workflows as
select w.workflow_type, w.state, count(*)::bigint as count,
       extract(epoch from now() - min(w.created_at))::bigint as oldest_age_sec
  from bitrix_sync.workflow_instances w
 where w.state not in ('succeeded', 'failed', 'cancelled')
 group by w.workflow_type, w.state;
comment on view bitrix_sync.status_workflows is 'Active workflows by type and state, with the oldest age.';

create or replace view bitrix_sync.status_commands as
select c.command_type, c.status, count(*)::bigint as count,
       extract(epoch from now() - min(c.created_at))::bigint as oldest_age_sec
  from bitrix_sync.crm_commands c
 where c.status not in ('succeeded')
 group by c.command_type, c.status;
comment on view bitrix_sync.status_commands is 'Unfinished and dead-lettered CRM commands by type and status.';

create or replace view bitrix_sync.status_webhooks as
select w.receiver, w.status, count(*)::bigint as count,
       extract(epoch from now() - min(w.received_at))::bigint as oldest_age_sec
  from bitrix_sync.webhook_inbox w
 where w.status not in ('processed')
 group by w.receiver, w.status;
comment on view bitrix_sync.status_webhooks is 'Unprocessed webhook inbox rows by receiver and status (webhook lag).';

create or replace view bitrix_sync.status_dead_letters as
select d.source, d.operation, d.error_code, count(*)::bigint as count,
       extract(epoch from now() - min(d.created_at))::bigint as oldest_age_sec
  from bitrix_sync.technical_dead_letters d
 where d.resolved_at is null
 group by d.source, d.operation, d.error_code;
comment on view bitrix_sync.status_dead_letters is 'Open technical dead letters by source, operation and safe code.';

create or replace view bitrix_sync.status_alerts as
select a.alert_type, a.severity, count(*)::bigint as open_count,
       count(*) filter (where a.first_occurred_at < now() - make_interval(hours =>
         coalesce((select (v.settings_values ->> 'alerts.sla_hours')::integer
                     from bitrix_sync.settings_versions v where v.status = 'active'), 24)))::bigint as sla_overdue
  from bitrix_sync.business_alerts a
 where a.status = 'open'
 group by a.alert_type, a.severity;
comment on view bitrix_sync.status_alerts is 'Open business alerts by type and severity, with how many are past the SLA.';
-- <<< sql/status.sql
-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md). Everything is revoked from public first; each role gets only
-- what it calls. Re-runnable.

revoke all on schema bitrix_sync from public;
revoke all on all tables in schema bitrix_sync from public;
revoke all on all sequences in schema bitrix_sync from public;
revoke all on all functions in schema bitrix_sync from public;
revoke all on function han_app.enqueue_contact_sync() from public;
revoke all on han_app.sync_queue from public;

-- bitrix_sync_user: the runtime. Writes its own schema's rows (no DDL: the schema is owned by the
-- migration role), processes sync_queue, reads identity/profile, writes CRM-master profile columns.
grant usage on schema bitrix_sync to bitrix_sync_user;
grant select, insert, update on all tables in schema bitrix_sync to bitrix_sync_user;
grant delete on bitrix_sync.webhook_inbox, bitrix_sync.crm_commands to bitrix_sync_user;
grant usage, select on all sequences in schema bitrix_sync to bitrix_sync_user;
grant execute on all functions in schema bitrix_sync to bitrix_sync_user;
grant usage on schema han_app to bitrix_sync_user;
grant select (id, phone_number, record_status, created_at, updated_at) on han_app.user_identity to bitrix_sync_user;
grant select (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)
  on han_app.client_profile to bitrix_sync_user;
grant update (full_name, citizenship, email, source_updated_at) on han_app.client_profile to bitrix_sync_user;
grant select on han_app.sync_queue to bitrix_sync_user;
grant update (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code,
              last_error_at, completed_at, cancel_reason, updated_at)
  on han_app.sync_queue to bitrix_sync_user;
-- graphile-worker's schema, when present (the service migrates it before this file runs).
do $$
begin
  if exists (select 1 from pg_namespace where nspname = 'graphile_worker') then
    grant usage on schema graphile_worker to bitrix_sync_user;
    grant select, insert, update, delete on all tables in schema graphile_worker to bitrix_sync_user;
    grant usage, select on all sequences in schema graphile_worker to bitrix_sync_user;
    grant execute on all functions in schema graphile_worker to bitrix_sync_user;
  end if;
end $$;
-- Readiness compares the applied migrations with the committed ones (§14).
do $$
begin
  if exists (select 1 from pg_namespace where nspname = 'graphile_migrate') then
    grant usage on schema graphile_migrate to bitrix_sync_user;
    grant select on graphile_migrate.migrations to bitrix_sync_user;
  end if;
end $$;
-- graphile-worker enables row-level security on its private tables without policies, which leaves
-- them to their owner. The runtime role is not the owner (the migration role is), so it gets an
-- explicit policy on each: the grants above decide what it may do.
do $$
declare
  v_table text;
begin
  for v_table in
    select c.relname from pg_class c
     where c.relnamespace = to_regnamespace('graphile_worker') and c.relkind = 'r' and c.relrowsecurity
  loop
    if not exists (select 1 from pg_policies p
                    where p.schemaname = 'graphile_worker' and p.tablename = v_table
                      and p.policyname = 'bitrix_sync_user_all') then
      execute format('create policy bitrix_sync_user_all on graphile_worker.%I for all to bitrix_sync_user using (true) with check (true)',
                     v_table);
    end if;
  end loop;
end $$;

-- bitrix_sync_admin: the audited procedures and the status views, nothing else. The procedures are
-- security definer, so no table grant is needed for them.
grant usage on schema bitrix_sync to bitrix_sync_admin;
grant execute on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.propose_settings(jsonb, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.validate_settings_version(integer) to bitrix_sync_admin;
grant execute on function bitrix_sync.activate_settings_version(integer, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.rollback_settings(integer, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.active_settings() to bitrix_sync_admin;
grant select on bitrix_sync.status_queue, bitrix_sync.status_workflows, bitrix_sync.status_commands,
  bitrix_sync.status_webhooks, bitrix_sync.status_dead_letters, bitrix_sync.status_alerts,
  bitrix_sync.settings, bitrix_sync.settings_versions, bitrix_sync.state_edges to bitrix_sync_admin;

-- han_app_user: the App writes identity and profile; sync_queue rows appear through the security
-- definer trigger, so it needs no write grant there. It has nothing in schema bitrix_sync.
grant usage on schema han_app to han_app_user;
grant select, insert, update on han_app.user_identity, han_app.client_profile to han_app_user;
grant select on han_app.sync_queue to han_app_user;
revoke all on schema bitrix_sync from han_app_user;
-- <<< sql/grants.sql
