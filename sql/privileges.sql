-- The privilege catalogue (§13, DESIGN.md "Roles"; issue 10): for every schema, table, view,
-- sequence and function of the project, what each of the three roles may do, written out, "nothing"
-- included. sql/grants.sql revokes everything and grants exactly this list; docs/security.md is
-- rendered from it; test/integration/privileges.test.ts checks that the database's ACLs equal it and
-- that no object of bitrix_sync (or the project's objects of han_app) lacks a decision.
--
-- Adding a function, table, view or sequence: add one row here (runtime, admin, app; '{}' is an
-- explicit "nothing") and include sql/privileges.sql and sql/grants.sql in the migration.
--
-- A privilege is written as GRANT takes it: 'SELECT', 'EXECUTE', 'USAGE', or with columns,
-- 'UPDATE (status, locked_by)'. Objects are schema-qualified; a function by its signature as
-- regprocedure prints it (types, no parameter names).
--
-- Who is who: bitrix_sync_user runs the service (the functions it calls and their internal
-- helpers; it writes its tables only in the columns those functions write, so an insert can never
-- name a state and identity or audit columns are out of reach; sql/row_guards.sql holds the same
-- rules for every writer). bitrix_sync_admin is an operator with psql: the audited admin functions
-- (security definer, so no table rights), the status views and the settings it changes.
-- han_app_user is the App: its identity and profile tables; sync_queue rows appear through the
-- security definer trigger.

create or replace view bitrix_sync.role_privileges as
with decisions (object_type, object_name, runtime, admin, app, note) as (values
  -- schemas
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], 'The project''s schema; the App has no business in it.'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], 'The App''s schema; the admin reaches the queue only through status_queue.'),

  -- App tables (§13: the runtime reads the columns it needs and writes only the CRM-master fields)
  ('table', 'han_app.user_identity', array['SELECT (id, phone_number, record_status, created_at, updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'Identity is App-master; the runtime reads it at send time.'),
  ('table', 'han_app.client_profile',
   array['SELECT (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)',
         'UPDATE (full_name, citizenship, email, source_updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'The runtime writes only the CRM-master fields (§3.1), through apply_crm_master_fields.'),
  ('table', 'han_app.sync_queue',
   array['SELECT', 'UPDATE (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code, last_error_at, completed_at, cancel_reason, updated_at)'],
   array[]::text[], array['SELECT'],
   'Intents appear through the fold of the App''s journal (fold_intent_journal, security definer); the runtime moves them through the lease functions and never inserts one.'),
  ('table', 'han_app.sync_queue_journal', array['SELECT'], array[]::text[], array['SELECT'],
   'The trigger (security definer) appends and fold_intent_journal (security definer) takes; the runtime and the App may look, neither writes.'),
  ('function', 'han_app.enqueue_contact_sync()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): fires for the App''s writes; nobody calls it.'),

  -- bitrix_sync tables the runtime writes through its functions: only the columns they write
  ('table', 'bitrix_sync.business_alerts',
   array['SELECT',
         'INSERT (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, previous_alert_id, correlation_id)',
         'UPDATE (occurrence_count, last_occurred_at, current_contact_id, selected_contact_id, candidate_contact_ids, details, correlation_id, crm_sync_status, item_id, stage_id, status, closed_at)'],
   array[]::text[], array[]::text[], 'Alerts are raised open and finished by the runtime; the admin sees them through status_alerts.'),
  ('sequence', 'bitrix_sync.business_alert_number_seq', array['USAGE'], array[]::text[], array[]::text[],
   'The default of business_alerts.alert_number, evaluated as the inserting role.'),
  ('table', 'bitrix_sync.contact_snapshots',
   array['SELECT',
         'INSERT (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)',
         'UPDATE (user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)'],
   array[]::text[], array[]::text[], 'Hashes of what the runtime last wrote into or read from each Contact.'),
  ('table', 'bitrix_sync.crm_commands',
   array['SELECT',
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)',
         'UPDATE (status, closed_at, close_reason, workflow_id, held_at, held_crm_updated_at, hold_released_at, hold_released_by)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions, which also hold and release a link made by phone alone; the user and the Contact of a link never change.'),
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token, failed_runs, retry_at)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash, trace_context)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at, trace_context)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- locks no other role can take (sql/enqueue.sql): tables without rows, locked only by the owner's
  -- security definer functions
  ('table', 'bitrix_sync.lock_intake_fold', array[]::text[], array[]::text[], array[]::text[],
   'One intake fold (and one cutover) at a time: fold_intent_journal and perform_cutover lock it.'),
  ('table', 'bitrix_sync.lock_intake_watch', array[]::text[], array[]::text[], array[]::text[],
   'The intake watch: a sleeping loop holds it (watch_intake), the App''s trigger marks its transactions on it.'),
  ('table', 'bitrix_sync.lock_metrics_fold', array[]::text[], array[]::text[], array[]::text[],
   'One metrics fold at a time (metrics_snapshot).'),

  -- metrics (sql/metrics.sql): written by security definer triggers, read by metrics_snapshot()
  ('table', 'bitrix_sync.metric_event_totals', array[]::text[], array[]::text[], array[]::text[],
   'Counter totals; only metrics_snapshot() (security definer) folds into and reads them.'),
  ('table', 'bitrix_sync.metric_events', array[]::text[], array[]::text[], array[]::text[],
   'Counted events; appended by the security definer _900 triggers whoever makes the change.'),

  -- the convergence audit (sql/convergence_audit.sql): written only by its security definer functions
  ('table', 'bitrix_sync.audit_marks', array[]::text[], array[]::text[], array[]::text[],
   'When each link was last compared; written and read by the audit''s functions only.'),
  ('table', 'bitrix_sync.retention_sweeps', array[]::text[], array[]::text[], array[]::text[],
   'Where the workflow retention sweep stands; only the retention functions (security definer) read and write it.'),
  ('table', 'bitrix_sync.audit_state', array[]::text[], array[]::text[], array[]::text[],
   'The audit''s run and scan cursor; the admin reads it through status_audit.'),
  ('table', 'bitrix_sync.drift_findings', array[]::text[], array[]::text[], array[]::text[],
   'Drift found by the audit; the admin reads it through status_drift and explain_user.'),
  ('table', 'bitrix_sync.drift_repairs', array[]::text[], array['SELECT'], array[]::text[],
   'Audit of repairs (repair_drift, the automatic repair); never deleted.'),
  ('sequence', 'bitrix_sync.drift_findings_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of drift_findings.'),
  ('sequence', 'bitrix_sync.drift_repairs_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of drift_repairs.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.sync_pauses', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by pause_sync() and resume_sync() (admin); the runtime reads it for the claim gate and the retry horizon.'),
  ('sequence', 'bitrix_sync.sync_pauses_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of sync_pauses.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, dead_letter_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
   'Audit of the admin functions (security definer) that write it; the Contact a decision named stays out of the admin''s reading.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),

  -- identity sequences: inserting into an identity column needs no right on its sequence
  ('sequence', 'bitrix_sync.admin_actions_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of admin_actions.'),
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),

  -- views
  ('view', 'bitrix_sync.parked_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Workflows waiting for a person, with their reason and the decisions that apply (docs/admin.md).'),
  ('view', 'bitrix_sync.rebind_request_status', array[]::text[], array['SELECT'], array[]::text[],
   'Rebind requests as an admin follows them (docs/admin.md).'),
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.'),
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).'),
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.'),
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.'),
  ('view', 'bitrix_sync.status_alert_mirror', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14): alerts whose smart-process item is behind (pending, failed); read by /metrics.'),
  ('view', 'bitrix_sync.status_commands', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_dead_letters', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_queue', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_webhooks', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_workflows', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_pause', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14, §17): the open pause, who and why, and the work still finishing.'),
  ('view', 'bitrix_sync.status_held_links', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): links whose CRM-master fields are held back; counts only.'),
  ('view', 'bitrix_sync.held_phone_links', array[]::text[], array['SELECT'], array[]::text[],
   'Held links made by phone alone, as an admin confirms them (docs/admin.md); no user or Contact IDs.'),
  ('view', 'bitrix_sync.status_audit', array[]::text[], array['SELECT'], array[]::text[],
   'The convergence audit''s last run, progress and scan (docs/runbook.md).'),
  ('view', 'bitrix_sync.status_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Drift found by the convergence audit, one row per user and kind, with the repair it would take.'),
  ('view', 'bitrix_sync.stuck_commands', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: commands uncertain, being reconciled, retrying or in flight, with their workflow; safe codes only.'),
  ('view', 'bitrix_sync.retrying_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: workflows waiting for a retry, with their last command; safe codes only.'),
  ('view', 'bitrix_sync.inbox_waiting', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: robot webhooks not processed yet; no entity IDs, addresses or bodies.'),
  ('view', 'bitrix_sync.deleted_alert_items', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: open alerts whose smart-process item was deleted in the CRM; no user or Contact IDs.'),
  ('view', 'bitrix_sync.status_reconciliation', array[]::text[], array['SELECT'], array[]::text[],
   'The reconciliation cursors without their leases (docs/runbook.md).'),

  -- admin functions (security definer): cutover, settings, rebind, re-recording a lost webhook
  ('function', 'bitrix_sync.accept_webhook(text,integer,text,inet)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Re-records one robot call by hand (the robot does not retry).'),
  ('function', 'bitrix_sync.activate_settings_version(integer,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.perform_cutover(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The one-time cutover (§17); it also opens the processing gate.'),
  ('function', 'bitrix_sync.pause_sync(text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Pauses processing on every replica (§17), audited.'),
  ('function', 'bitrix_sync.resume_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Read-only: what resuming releases, uncertain writes first.'),
  ('function', 'bitrix_sync.resume_sync(text,bigint,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Ends the open pause after showing what waits, audited.'),
  ('function', 'bitrix_sync.propose_settings(jsonb,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind (§5.4).'),
  ('function', 'bitrix_sync.cancel_rebind_request(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind: cancel an open request (docs/admin.md).'),
  ('function', 'bitrix_sync.confirm_phone_link(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Held phone links: release a hold and queue the read that applies the fields, audited (docs/admin.md).'),
  ('function', 'bitrix_sync.resume_parked_workflow(uuid,text,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: resume with a decision.'),
  ('function', 'bitrix_sync.cancel_parked_workflow(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: cancel with a reason.'),
  ('function', 'bitrix_sync._parked_decisions(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The decisions a parked reason admits; called by the parked_workflows view with the reader''s rights.'),
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.list_dead_letters(boolean,integer)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: what is open, and what a requeue would do (docs/admin.md).'),
  ('function', 'bitrix_sync.acknowledge_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: resolved without a new attempt, audited.'),
  ('function', 'bitrix_sync.requeue_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: a new attempt through the normal state machine, audited.'),
  ('function', 'bitrix_sync.retention_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Retention: what the next run would delete (reads the history: by hand only).'),
  ('function', 'bitrix_sync.delete_retention_batch(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one batch of finished rows (security definer: nobody holds DELETE on those tables); the hourly task, or an admin now.'),
  ('function', 'bitrix_sync.retention_step(text,timestamp with time zone)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one step of one table and whether to call again (security definer); the hourly task, or an admin now.'),

  -- the convergence audit's admin functions (security definer)
  ('function', 'bitrix_sync.repair_drift(text,text,uuid[],boolean)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Records the intents that bring drifted users back (or, dry run, lists them); audited.'),
  ('function', 'bitrix_sync.explain_user(uuid)', array[]::text[], array['EXECUTE'], array[]::text[],
   'One user''s story in time order; personal values masked.'),
  ('function', 'bitrix_sync.diagnose_app_values(uuid,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'npm run diagnose: the App''s values masked with salted digests.'),
  ('function', 'bitrix_sync.request_convergence_audit(text,text,boolean)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Queues an audit run now (e.g. {"all": true} after a restore); audited.'),
  ('function', 'bitrix_sync.crontab_runs()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Runbook: when each crontab entry last fired.'),
  ('function', 'bitrix_sync.request_reconciliation(text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Runbook: a reconciliation run now, audited (security definer: it queues a graphile-worker job).'),
  ('function', 'bitrix_sync.worker_jobs()', array[]::text[], array['EXECUTE'], array[]::text[],
   'The service''s graphile-worker jobs without payloads or error texts (docs/runbook.md).'),
  ('function', 'bitrix_sync.analyze_engine_tables()', array[]::text[], array['EXECUTE'], array[]::text[],
   'ANALYZE of the engine''s busiest tables after a large backlog (docs/runbook.md).'),
  ('function', 'bitrix_sync._drift_repair_intent(text[],boolean)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The repair of a drift kind; called by the status_drift view with the reader''s rights.'),
  ('function', 'bitrix_sync.acquire_spare_crm_request(text,text,double precision,integer,integer,double precision,integer,double precision)',
   array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Limiter, spare budget only (security definer): the convergence audit, and npm run diagnose as the admin.'),
  ('function', 'bitrix_sync.release_spare_crm_request(uuid)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Limiter: frees a spare slot (security definer, spare slots only).'),

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),
  ('function', 'bitrix_sync.sync_paused()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The pause gate of the claim functions, for readiness too.'),
  ('function', 'bitrix_sync._paused_since(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of _retry_deadline, evaluated as the role that computes a deadline.'),

  ('function', 'bitrix_sync.metrics_snapshot(text,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'GET /metrics (security definer): counts, ages and counters with low-cardinality labels; the admin may run it in psql.'),

  -- runtime functions: the receivers
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement (and the readiness probe of that path).'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
  ('function', 'bitrix_sync.fold_intent_journal(integer,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Called first by claim_sync_tasks and perform_cutover; an admin may fold to see recorded intents in the queue now.'),
  ('function', 'bitrix_sync.watch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop takes the intake watch before it sleeps, in a transaction it ends when it wakes (the App''s intents NOTIFY meanwhile); security definer: the lock is on a table only the owner may lock.'),
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).'),
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.step_context(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (the start of a step).'),
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  ('function', 'bitrix_sync.take_sync_tasks(uuid[],uuid[],uuid[],text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake of a claimed batch in one call.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.due_commands()', array['EXECUTE'], array[]::text[], array[]::text[], 'The pump''s backlog before it takes a limiter permit (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.complete_commands(bigint[],uuid[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump settles a batch with it).'),
  ('function', 'bitrix_sync.bring_forward_commands(text[],integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump after a portal-wide failure).'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.mark_command_uncertain(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.reject_command(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.release_command(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.resolve_command_reconcile(bigint,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.retry_command(bigint,uuid,text,interval,boolean,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.send_commands(bigint[],uuid[],uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  -- runtime functions: the limiter
  ('function', 'bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.blocked_crm_methods(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_operating(text,text[],double precision[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_method_blocked(text,text,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_answered(text,double precision,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.release_crm_request(uuid,text,boolean)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Limiter: the release that also records that the portal answered (sql/crm_health.sql).'),
  ('function', 'bitrix_sync.crm_last_answered_at(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'When the portal last answered any replica, for readiness and status.'),
  -- runtime functions: inbox processing, mapping, snapshots, alerts, rebind workflow, reconciliation
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.recover_alert_command(bigint,interval)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Alert mirroring: an unanswered alert command moves on (sql/alert_mirror.sql).'),
  ('function', 'bitrix_sync.alerts_to_look_up(integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: items to look up.'),
  ('function', 'bitrix_sync.issue_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup of an item.'),
  ('function', 'bitrix_sync.resolve_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup''s outcome.'),
  ('function', 'bitrix_sync.fail_alert_lookup(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: a lookup that failed for good.'),
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.apply_crm_master_fields(uuid,text,text,text,text,text,text,text,timestamp with time zone,boolean,timestamp with time zone,timestamp with time zone,text,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots and the CRM-master profile write.'),
  ('function', 'bitrix_sync.mark_contact_snapshot_stale(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_created(text,uuid,text,text,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_phone(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.finish_business_alert(bigint,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirror_failed(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirrored(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.raise_business_alert(text,text,text,uuid,text,text,jsonb,jsonb,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.record_alert_item(bigint,bigint,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.complete_rebind(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync.start_rebind_request(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync.claim_reconciliation_cursor(text,interval,boolean,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation (gated by the cutover).'),
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.finish_reconciliation_run(text,uuid,integer,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.hold_phone_link(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: the hold of a link made by phone alone (mapping.hold_after_phone_link).'),
  ('function', 'bitrix_sync.keep_phone_link_hold(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a link found through the user id an earlier, still held link of the pair wrote keeps the hold.'),
  ('function', 'bitrix_sync.held_link_read(uuid,timestamp with time zone,boolean)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a read of a held link''s Contact (final read, webhook, reconciliation) records, keeps or releases the hold.'),
  ('function', 'bitrix_sync.rekey_contact_phones(text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[],
   'The hourly rekey_hashes task: legacy phone hashes of snapshots rewritten under the hash key.'),
  -- runtime functions: the convergence audit (security definer, fenced by the run's lease)
  ('function', 'bitrix_sync.claim_audit_run(boolean,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit (gated by the cutover).'),
  ('function', 'bitrix_sync.audit_sample(uuid,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.record_audit_findings(uuid,timestamp with time zone,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.refresh_user_drift(uuid,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.record_registered_contacts(uuid,timestamp with time zone,bigint,bigint,bigint[],jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.advance_registered_scan(uuid,bigint,integer,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.finish_audit_run(uuid,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.fail_audit_run(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Convergence audit.'),
  ('function', 'bitrix_sync.auto_repair_drift(text[])', array['EXECUTE'], array[]::text[], array[]::text[],
   'Convergence audit: the repair the setting audit.auto_repair_kinds switches on.'),

  -- internal helpers the runtime's (security invoker) functions call: a nested call is checked
  -- against the calling role too
  ('function', 'bitrix_sync._check_bitrix_error(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._check_code(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: refuses raw text as an error code.'),
  ('function', 'bitrix_sync._check_limiter_name(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter.'),
  ('function', 'bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter(text,text,text,text,integer,timestamp with time zone,uuid,bigint,uuid,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the functions that give a row up: the one writer of technical_dead_letters rows.'),
  ('function', 'bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the queue functions.'),
  ('function', 'bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the inbox functions.'),
  ('function', 'bitrix_sync._held_workflow(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the workflow functions.'),
  ('function', 'bitrix_sync._is_write_command(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of claim_commands.'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue, start_or_join, accept_webhooks).'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue_command, start_or_join_workflow, accept_webhooks).'),
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.'),
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.'),
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.'),
  ('function', 'bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of schedule_workflow_retry: the horizon counts from a requeue.'),
  ('function', 'bitrix_sync._alert_add_unsafe(bigint)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the alert mirror (runAlertSync asks it before an add).'),

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
  ('function', 'bitrix_sync._check_audit_lease(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.'),
  ('function', 'bitrix_sync._drift_busy_users(timestamp with time zone,uuid[])', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.'),
  ('function', 'bitrix_sync._drift_kind_group(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.'),
  ('function', 'bitrix_sync._mask_pii(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of explain_user and diagnose_app_values.'),
  ('function', 'bitrix_sync._repair_drift(text,text,uuid[],text[],boolean,boolean,boolean)', array[]::text[], array[]::text[], array[]::text[],
   'Internal helper of repair_drift and auto_repair_drift.'),
  ('function', 'bitrix_sync.drift_metrics()', array[]::text[], array[]::text[], array[]::text[],
   'Called by metrics_snapshot (security definer); not on its own.'),
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync.clear_unkeyed_hashes()', array[]::text[], array[]::text[], array[]::text[],
   'Run by migration 000029 as the owner: unkeyed hashes cleared where the next read recomputes them.'),
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._open_dead_letter(bigint)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._resolve_dead_letters(bigint[],text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._retention_cutoff(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.'),
  ('function', 'bitrix_sync._retention_sweep_workflows(timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.'),
  ('function', 'bitrix_sync._active_link_count()', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.'),
  ('function', 'bitrix_sync._planner_count(regclass)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.'),
  ('function', 'bitrix_sync.tg_entity_external_mapping__audit_mark()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): one audit mark per active link, whoever opens or closes it.'),
  ('function', 'bitrix_sync._record_admin_action(text,uuid,uuid,text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._rebind_crm_outcome(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of _close_rebind_request and cancel_rebind_request.'),
  ('function', 'bitrix_sync._close_rebind_request(uuid)', array[]::text[], array[]::text[], array[]::text[],
   'Internal helper of the trigger that closes the request of a finished contact.rebind workflow (the trigger function is security definer); takes the workflow id, never a row.'),
  ('function', 'bitrix_sync.tg_workflow_instances__close_rebind_request()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): closes the request of a finished contact.rebind workflow, whoever moves it.'),
  ('function', 'bitrix_sync.tg_workflow_instances__start_held_intent()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync._normalise_settings(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._rebind_request_of(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the rebind workflow functions.'),
  ('function', 'bitrix_sync._resolve_conflict_alerts(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of complete_rebind.'),
  ('function', 'bitrix_sync._alert_settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.'),
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_business_alerts__count_remote_missing()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_crm_commands__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_technical_dead_letters__count()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_webhook_inbox__count_coalesced()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_workflow_instances__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_settings_versions__freeze()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
)
select d.object_type, d.object_name, r.role, r.privileges, d.note
  from decisions d
  cross join lateral (values ('bitrix_sync_user', d.runtime), ('bitrix_sync_admin', d.admin), ('han_app_user', d.app))
    as r(role, privileges);
comment on view bitrix_sync.role_privileges is
  'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why. sql/grants.sql applies exactly this; docs/security.md is rendered from it.';

-- What the database actually grants, in the catalogue's terms, and where the two differ. The
-- project's objects are all of schema bitrix_sync and the objects of han_app the catalogue names
-- (in production han_app holds the App's other tables, which are none of this project's business).
--
-- Beyond the three roles' ACLs it reports what would give someone the project's rights without a
-- grant of this catalogue:
--   * a privilege on a project object held by any other role (the objects' owner aside; the App's
--     schema and its identity and profile tables are the App's to share);
--   * role memberships. The catalogue's rule: each project role may be held by roles outside the
--     project (a login, or a group of logins), each of which holds no other project role, directly
--     or through groups, and none WITH ADMIN OPTION (it could hand the role on); a project role is a
--     member of no role at all (it would gain that role's rights, and a project role inside another
--     one merges the two). The owner of schema bitrix_sync (the migration role, which creates the
--     roles and may administer them) is exempt.
create or replace view bitrix_sync.role_privilege_drift as
with recursive objects as (
  select 'schema'::text as object_type, n.nspname::text as object_name, n.nspowner as owner, n.nspacl as acl,
         null::oid as relid, 'n'::"char" as acl_kind
    from pg_namespace n where n.nspname in ('bitrix_sync', 'han_app')
  union all
  select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'view' else 'table' end,
         format('%I.%I', n.nspname, c.relname), c.relowner, c.relacl, c.oid,
         case c.relkind when 'S' then 's'::"char" else 'r'::"char" end
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
  union all
  select 'function', p.oid::regprocedure::text, p.proowner, p.proacl, null, 'f'::"char"
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('bitrix_sync', 'han_app')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
), catalogue as (
  select rp.object_type, rp.object_name, rp.role, rp.privileges from bitrix_sync.role_privileges rp
), project_objects as (
  select o.* from objects o
   where o.object_name = 'bitrix_sync' or o.object_name like 'bitrix\_sync.%'
      or exists (select 1 from catalogue c where c.object_type = o.object_type and c.object_name = o.object_name)
), roles (role) as (
  values ('bitrix_sync_user'), ('bitrix_sync_admin'), ('han_app_user')
), actual as (
  -- object-wide privileges ...
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC') as role, a.privilege_type as privilege,
         null::text as column_name
    from project_objects o
    cross join lateral aclexplode(coalesce(o.acl, acldefault(o.acl_kind, o.owner))) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
      or (a.grantee <> o.owner and o.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
  union all
  -- ... and column privileges
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname::text
    from project_objects o
    join pg_attribute att on att.attrelid = o.relid and att.attnum > 0 and not att.attisdropped and att.attacl is not null
    cross join lateral aclexplode(att.attacl) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
      or (a.grantee <> o.owner and o.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
), project_role_oids as (
  select r.oid, r.rolname::text as rolname from pg_roles r where r.rolname in (select role from roles)
), schema_owner as (
  select n.nspowner as oid from pg_namespace n where n.nspname = 'bitrix_sync'
), held (holder, project_role) as (
  -- Who holds each project role, directly or through groups.
  select m.member, m.roleid from pg_auth_members m where m.roleid in (select oid from project_role_oids)
  union
  select m.member, h.project_role from held h join pg_auth_members m on m.roleid = h.holder
), membership_drift as (
  -- A project role that is a member of any role, and a project role held WITH ADMIN OPTION.
  select g.rolname::text as granted, mr.rolname::text as member,
         case when m.admin_option then 'MEMBER WITH ADMIN OPTION' else 'MEMBER' end as privilege,
         'extra_membership'::text as problem
    from pg_auth_members m
    join pg_roles g on g.oid = m.roleid
    join pg_roles mr on mr.oid = m.member
   where m.member not in (select oid from schema_owner)
     and (m.member in (select oid from project_role_oids)
          or (m.admin_option and m.roleid in (select oid from project_role_oids)))
  union all
  -- A role outside the project that holds more than one project role.
  select p.rolname, hr.rolname::text, 'MEMBER', 'conflicting_membership'
    from held h
    join project_role_oids p on p.oid = h.project_role
    join pg_roles hr on hr.oid = h.holder
   where h.holder not in (select oid from project_role_oids)
     and h.holder not in (select oid from schema_owner)
     and (select count(distinct h2.project_role) from held h2 where h2.holder = h.holder) > 1
), expected as (
  select c.object_type, c.object_name, c.role, m[1] as privilege, btrim(col) as column_name
    from catalogue c
    cross join lateral unnest(c.privileges) spec
    cross join lateral regexp_match(spec, '^([A-Z]+)\s*(?:\((.*)\))?$') m
    cross join lateral unnest(coalesce(string_to_array(m[2], ','), array[null]::text[])) col
)
select e.object_type, e.object_name, e.role, e.privilege, e.column_name, 'missing'::text as problem
  from expected e
 where exists (select 1 from project_objects o where o.object_type = e.object_type and o.object_name = e.object_name)
   and not exists (select 1 from actual a where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                            and a.column_name is not distinct from e.column_name)
union all
select a.object_type, a.object_name, a.role, a.privilege, a.column_name, 'extra'
  from actual a
 where not exists (select 1 from expected e where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                              and a.column_name is not distinct from e.column_name)
   -- PUBLIC is checked only on what the project owns (it never grants PUBLIC anything); the App's
   -- identity and profile tables and its schema keep whatever the App gives everyone.
   and not (a.role = 'PUBLIC' and a.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
union all
select o.object_type, o.object_name, r.role, null, null, 'undecided'
  from project_objects o cross join roles r
 where not exists (select 1 from catalogue c where (c.object_type, c.object_name, c.role) = (o.object_type, o.object_name, r.role))
union all
select distinct c.object_type, c.object_name, null, null, null, 'unknown_object'
  from catalogue c
 where not exists (select 1 from objects o where o.object_type = c.object_type and o.object_name = c.object_name)
union all
select distinct 'role', d.granted, d.member, d.privilege, null, d.problem
  from membership_drift d;
comment on view bitrix_sync.role_privilege_drift is
  'Differences between the database''s ACLs and bitrix_sync.role_privileges: missing and extra privileges of the three roles and PUBLIC (column privileges by column), extra privileges of any other role on the project''s objects (the owner aside; the App''s schema, identity and profile tables are the App''s), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object), and role memberships outside the catalogue''s rule (object_type role, object_name the role held, role the member): a project role that is a member of a role or held WITH ADMIN OPTION (extra_membership), a role outside the project holding more than one project role, directly or through groups (conflicting_membership). Empty when they agree.';
