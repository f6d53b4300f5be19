-- Expand (§6.1, §6.3 steps 1-5, §6.4, §7, §12.3, §13, §17): reshape han_app.sync_queue to the
-- full-sync contract without losing rows, create schema bitrix_sync with its tables, move the legacy
-- mapping into it (verified; never two writable copies), then install functions, triggers, views
-- and grants from sql/. See docs/migrations.md for the legacy shapes and the row mapping.
set local lock_timeout = '10s';

-- Roles first: grants below name them. Created NOLOGIN; deployment grants LOGIN (DESIGN.md).
-- #include sql/roles.sql

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
-- #include sql/common.sql
-- #include sql/state_machines.sql
-- #include sql/enqueue.sql
-- #include sql/queue.sql
-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/webhooks.sql
-- #include sql/mapping.sql
-- #include sql/rebind.sql
-- #include sql/alerts.sql
-- #include sql/settings.sql
-- #include sql/cutover.sql
-- #include sql/status.sql
-- #include sql/grants.sql
