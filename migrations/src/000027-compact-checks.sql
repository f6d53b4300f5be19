-- The engine's and the receivers' CHECKs written so that their stored form is small (issue 14,
-- bench:engine; docs/performance.md, "Fourth round: compact CHECKs"). PostgreSQL 15 reads every
-- CHECK of a table from its stored node text, simplifies it and compiles it again for each INSERT or
-- UPDATE statement, and the engine writes its rows one statement at a time inside its functions
-- (issue_command, fire_workflow_event, ...). An IN list over a varchar column is stored as an array
-- of casts, 250 bytes per value; `col::text = any ('{...}'::text[])` admits exactly the same values
-- and stores one constant. Measured in one backend, 20 000 single-row UPDATEs each: crm_commands
-- 30.9 -> 22.2 µs per statement, workflow_instances 32.8 -> 24.3 µs (without CHECKs: 6.7 and 8.7).
-- Migration 000020 (intent-writes) did the same for han_app.sync_queue.
--
-- Each replacement is NOT VALID: it admits exactly what the constraint it replaces admitted, which
-- every existing row satisfied, so no validation scan runs under the table's lock. A DBA may run
-- ALTER TABLE ... VALIDATE CONSTRAINT at leisure (SHARE UPDATE EXCLUSIVE, writes continue). Names are
-- kept, so error messages and docs that name a constraint still hold. One ALTER TABLE per table: one
-- short ACCESS EXCLUSIVE lock each, bounded by lock_timeout.
set local lock_timeout = '10s';

alter table bitrix_sync.crm_commands
  drop constraint crm_commands_status_check,
  add constraint crm_commands_status_check
    check (status::text = any ('{pending,leased,in_flight,succeeded,retry_wait,uncertain,reconcile,dead_letter}'::text[])) not valid,
  drop constraint crm_commands_command_type_check,
  add constraint crm_commands_command_type_check
    check (command_type::text = any ('{contact.find_by_phone,contact.find_by_user_id,contact.read,contact.add,contact.update,contact.list_changed,citizenship.list,alert.add,alert.update,alert.get,alert.list}'::text[])) not valid,
  drop constraint crm_commands_completed,
  add constraint crm_commands_completed
    check ((status::text = any ('{succeeded,dead_letter}'::text[])) = (completed_at is not null)) not valid,
  drop constraint crm_commands_lease,
  add constraint crm_commands_lease
    check ((status::text = any ('{leased,in_flight}'::text[])) = (lease_token is not null and locked_until is not null)) not valid;

alter table bitrix_sync.workflow_instances
  drop constraint workflow_instances_state_check,
  add constraint workflow_instances_state_check
    check (state::text = any ('{created,running,waiting_crm,waiting_retry,waiting_manual,succeeded,failed,cancelled}'::text[])) not valid,
  drop constraint workflow_instances_workflow_type_check,
  add constraint workflow_instances_workflow_type_check
    check (workflow_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])) not valid,
  drop constraint workflow_instances_intent_type_check,
  add constraint workflow_instances_intent_type_check
    check (intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])) not valid,
  drop constraint workflow_instances_held_intent,
  add constraint workflow_instances_held_intent
    check (held_intent_type is null
           or held_intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])) not valid,
  drop constraint workflow_instances_finished,
  add constraint workflow_instances_finished
    check ((state::text = any ('{succeeded,failed,cancelled}'::text[])) = (finished_at is not null)) not valid;

alter table bitrix_sync.entity_external_mapping
  drop constraint entity_external_mapping_status_check,
  add constraint entity_external_mapping_status_check
    check (status::text = any ('{active,closed,broken}'::text[])) not valid;

alter table bitrix_sync.webhook_inbox
  drop constraint webhook_inbox_status_check,
  add constraint webhook_inbox_status_check
    check (status::text = any ('{received,coalesced,processing,processed,retry_wait,dead_letter}'::text[])) not valid,
  drop constraint webhook_inbox_receiver_check,
  add constraint webhook_inbox_receiver_check
    check (receiver::text = any ('{contact,alert}'::text[])) not valid;

-- The two AFTER UPDATE OF state triggers of workflow_instances whose WHEN had IN lists
-- (_300_close_rebind_request, _400_start_held_intent) are created again from their files, whose
-- WHEN clauses are now written the same way.
-- #include sql/workflows.sql
-- #include sql/rebind.sql
-- fold_intent_journal()'s comment now says what a newer intent does to a retry_wait and a pending
-- row (the function itself is unchanged since 000026).
-- #include sql/enqueue.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
