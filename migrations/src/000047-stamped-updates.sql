-- A CRM command costs the database less (issue 36, second round): the engine's hot statements on
-- crm_commands and workflow_instances (claim_commands, send_commands, complete_command(s),
-- issue_command and its wake-up, claim_workflows, fire_workflow_event) stamp updated_at themselves,
-- and the _900_set_updated_at trigger of every table fires only when a statement left updated_at
-- as it was: no PL/pgSQL call per row moved by the engine, the same stamp for every other writer.
-- send_commands reads the retry horizon once per batch for first sends (a resend keeps the horizon
-- of its first send, as before). take_sync_tasks completes its batch of intents in one statement
-- after starting or joining their workflows, with one check of the App's tables, where it called
-- complete_sync_task() (a check and an UPDATE) per intent.
--
-- Expand only: the runtime role may now write updated_at of both tables (the column the trigger
-- wrote on its behalf); function bodies replaced with their signatures and results unchanged;
-- triggers replaced with a WHEN clause. What is stored is unchanged.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/commands/tables.sql
-- #include sql/workflows/tables.sql
-- #include sql/commands/issue.sql
-- #include sql/commands/claim.sql
-- #include sql/commands/complete.sql
-- #include sql/workflows/lease.sql
-- #include sql/workflows/steps.sql
select bitrix_sync.apply_privileges();
-- The files that replace triggers last: replacing one locks its table until the commit, and
-- apply_privileges() above takes seconds (000044's note). start.sql replaces _400_start_held_intent
-- as it was.
-- #include sql/workflows/start.sql
-- #include sql/common/updated_at.sql
