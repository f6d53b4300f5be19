-- The convergence audit (§10.2's "losses and discrepancies"; docs/workflows.md, "Convergence
-- audit"): the tables that say how far the App, the snapshots and the CRM have silently come apart,
-- and the functions of sql/convergence_audit.sql that fill and read them. New, empty tables: nothing
-- is moved or rewritten. Also the `audit.*` settings, the audit's share of the CRM limiter
-- (acquire_spare_crm_request), the drift metrics, and the admin functions repair_drift,
-- explain_user, request_convergence_audit and the admin-only replacements of the runbook's owner
-- queries (status_reconciliation, worker_jobs, analyze_engine_tables, and in sql/admin_views.sql
-- stuck_commands, retrying_workflows, inbox_waiting, deleted_alert_items, crontab_runs,
-- request_reconciliation).
set local lock_timeout = '10s';

-- The audit's one run at a time, its registered-Contact scan cursor and its last outcome.
create table if not exists bitrix_sync.audit_state (
  singleton boolean primary key default true check (singleton),
  last_run_started_at timestamptz,
  last_run_mode varchar(8) check (last_run_mode in ('sample', 'all')),
  last_run_status varchar(16) check (last_run_status in ('running', 'succeeded', 'failed')),
  lease_token uuid,
  last_success_at timestamptz,
  last_all_success_at timestamptz,
  last_error_code varchar(64) check (last_error_code is null or last_error_code ~ '^[a-z][a-z0-9_]{0,63}$'),
  last_audited integer check (last_audited >= 0),
  last_requests integer check (last_requests >= 0),
  last_links integer check (last_links >= 0),
  last_overdue integer check (last_overdue >= 0),
  registered_after_id bigint not null default 0 check (registered_after_id >= 0),
  registered_cycle_started_at timestamptz,
  registered_cycle_seen integer not null default 0 check (registered_cycle_seen >= 0),
  registered_cycle_total integer check (registered_cycle_total >= 0),
  registered_cycle_finished_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint audit_state_lease check ((last_run_status = 'running') = (lease_token is not null))
);
comment on table bitrix_sync.audit_state is
  'The convergence audit''s state (one row): the run in progress (lease), the last run''s outcome and counts, and the cursor of its scan of registered Contacts.';
comment on column bitrix_sync.audit_state.singleton is 'Always true: the table has one row.';
comment on column bitrix_sync.audit_state.last_run_started_at is 'When the last (or current) run was claimed.';
comment on column bitrix_sync.audit_state.last_run_mode is 'sample (the least recently audited links) or all (every active link, {"all": true}).';
comment on column bitrix_sync.audit_state.last_run_status is 'running, succeeded or failed.';
comment on column bitrix_sync.audit_state.lease_token is 'Fences the run in progress: only its holder records findings and finishes it.';
comment on column bitrix_sync.audit_state.last_success_at is 'When the last run finished successfully (bitrix_sync_audit_last_success_timestamp_seconds).';
comment on column bitrix_sync.audit_state.last_all_success_at is 'When the last full ({"all": true}) run finished successfully.';
comment on column bitrix_sync.audit_state.last_error_code is 'Safe code of the last failed run.';
comment on column bitrix_sync.audit_state.last_audited is 'Links the last finished run compared with their Contacts.';
comment on column bitrix_sync.audit_state.last_requests is 'HTTP requests the last finished run sent to the portal.';
comment on column bitrix_sync.audit_state.last_links is 'Active links of active users when the last run finished.';
comment on column bitrix_sync.audit_state.last_overdue is 'Of those, the links not compared within audit.period_days when the last run finished (bitrix_sync_audit_overdue_links).';
comment on column bitrix_sync.audit_state.registered_after_id is 'Keyset cursor of the scan of registered Contacts: the scan goes on above this Contact ID (0: a new cycle).';
comment on column bitrix_sync.audit_state.registered_cycle_started_at is 'When the current cycle of the registered scan started.';
comment on column bitrix_sync.audit_state.registered_cycle_seen is 'Registered Contacts the current cycle has listed so far.';
comment on column bitrix_sync.audit_state.registered_cycle_total is 'Registered Contacts the last complete cycle listed: sizes the pages of each sampled run.';
comment on column bitrix_sync.audit_state.registered_cycle_finished_at is 'When the last cycle of the registered scan completed.';
comment on column bitrix_sync.audit_state.created_at is 'When the audit was installed; stands for the last success until the first run succeeds.';
comment on column bitrix_sync.audit_state.updated_at is 'Last change of the row.';
insert into bitrix_sync.audit_state (singleton) values (true) on conflict do nothing;

-- When each active link was last compared with its Contact: the sample takes the oldest first.
create table if not exists bitrix_sync.audit_marks (
  mapping_id uuid primary key,
  user_id uuid not null,
  audited_at timestamptz not null
);
comment on table bitrix_sync.audit_marks is
  'When the convergence audit last compared each link (entity_external_mapping.id) with its Contact; marks of links no longer active are dropped by the next run.';
comment on column bitrix_sync.audit_marks.mapping_id is 'The link (entity_external_mapping.id); no foreign key, mappings are history and marks are not.';
comment on column bitrix_sync.audit_marks.user_id is 'The link''s App user.';
comment on column bitrix_sync.audit_marks.audited_at is 'When the run that compared it read the Contact.';

-- What the audit found out of step: one row per user (or, for a Contact registered without a
-- readable user id, per Contact) and kind, deleted when a later audit finds it in step.
create table if not exists bitrix_sync.drift_findings (
  id bigint generated always as identity primary key,
  kind varchar(32) not null check (kind::text = any ('{contact_missing,phone_missing,user_id_wrong,registered_wrong,crm_master_behind,unmapped_user,inactive_user_linked,registered_inactive_user,registered_unknown_user}'::text[])),
  user_id uuid,
  contact_id varchar(128) check (contact_id is null or contact_id ~ '^[1-9][0-9]{0,17}$'),
  details jsonb not null default '{}' check (jsonb_typeof(details) = 'object'),
  detected_at timestamptz not null default now(),
  last_seen_at timestamptz not null default now(),
  repair_requested_at timestamptz,
  repair_intent varchar(32) check (repair_intent is null or repair_intent::text = any ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])),
  constraint drift_findings_subject check (user_id is not null or contact_id is not null)
);
-- New, empty table: the indexes build instantly.
-- squawk-ignore require-concurrent-index-creation
create unique index if not exists drift_findings_subject_uq
  on bitrix_sync.drift_findings (kind, (coalesce(user_id::text, 'contact:' || contact_id)));
-- squawk-ignore require-concurrent-index-creation
create index if not exists drift_findings_user_idx on bitrix_sync.drift_findings (user_id);
comment on index bitrix_sync.drift_findings_subject_uq is 'One finding per user (or Contact without a user) and kind.';
comment on index bitrix_sync.drift_findings_user_idx is 'The findings of one user (explain_user, repair_drift, the audit''s clearing).';
comment on table bitrix_sync.drift_findings is
  'Silent drift the convergence audit found between the App, the snapshots and the CRM: one row per user and kind (status_drift shows it). A later audit that finds the pair in step deletes it.';
comment on column bitrix_sync.drift_findings.kind is 'contact_missing, phone_missing, user_id_wrong, registered_wrong, crm_master_behind, unmapped_user, inactive_user_linked, registered_inactive_user, registered_unknown_user (docs/workflows.md).';
comment on column bitrix_sync.drift_findings.user_id is 'The App user (for registered_unknown_user: the UUID the Contact carries); null when the Contact carries no readable user id.';
comment on column bitrix_sync.drift_findings.contact_id is 'The Contact involved, when there is one.';
comment on column bitrix_sync.drift_findings.details is 'Safe details: field names, counts and flags, never a value of the App or the CRM.';
comment on column bitrix_sync.drift_findings.detected_at is 'When an audit first found it.';
comment on column bitrix_sync.drift_findings.last_seen_at is 'When an audit last found it.';
comment on column bitrix_sync.drift_findings.repair_requested_at is 'When repair_drift (or the automatic repair) recorded the intent meant to bring it back.';
comment on column bitrix_sync.drift_findings.repair_intent is 'The intent that repair recorded.';

-- The audit of repairs: one row per user a repair acted on, never deleted.
create table if not exists bitrix_sync.drift_repairs (
  id bigint generated always as identity primary key,
  admin_action_id bigint,
  user_id uuid not null,
  contact_id varchar(128) check (contact_id is null or contact_id ~ '^[1-9][0-9]{0,17}$'),
  kinds text[] not null check (cardinality(kinds) > 0),
  intent varchar(32) not null check (intent::text = any ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])),
  requested_by varchar(128) not null check (length(btrim(requested_by)) > 0),
  reason text not null check (length(btrim(reason)) between 3 and 500),
  db_user varchar(128) not null default session_user,
  requested_at timestamptz not null default now()
);
-- squawk-ignore require-concurrent-index-creation
create index if not exists drift_repairs_user_idx on bitrix_sync.drift_repairs (user_id, requested_at);
comment on index bitrix_sync.drift_repairs_user_idx is 'The repairs of one user, in time order (explain_user).';
comment on table bitrix_sync.drift_repairs is
  'Audit of drift repairs: for each user a repair acted on, the kinds found, the intent recorded, who asked (and the database login) and why. Never deleted.';
comment on column bitrix_sync.drift_repairs.admin_action_id is 'The admin_actions row of the repair_drift call; null for the automatic repair (audit.auto_repair_kinds).';
comment on column bitrix_sync.drift_repairs.user_id is 'The user whose intent was recorded.';
comment on column bitrix_sync.drift_repairs.contact_id is 'The Contact of the findings, when there was one.';
comment on column bitrix_sync.drift_repairs.kinds is 'The drift kinds the user had when the repair was recorded.';
comment on column bitrix_sync.drift_repairs.intent is 'The intent recorded in han_app.sync_queue_journal (reason drift_repair).';
comment on column bitrix_sync.drift_repairs.requested_by is 'Who asked (operator id as given; audit:auto for the automatic repair).';
comment on column bitrix_sync.drift_repairs.reason is 'Why, as given.';
comment on column bitrix_sync.drift_repairs.db_user is 'The database login (session_user) that ran the repair.';
comment on column bitrix_sync.drift_repairs.requested_at is 'When the intent was recorded.';

-- #include sql/settings.sql
-- #include sql/limiter.sql
-- #include sql/convergence_audit.sql
-- #include sql/admin_views.sql
-- #include sql/metrics.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
