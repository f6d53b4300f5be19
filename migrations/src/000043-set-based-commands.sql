-- A CRM command costs the database less (issue 36): the transition guards of every state machine
-- have their legal edges compiled into the trigger's WHEN clause, so a legal transition runs no
-- PL/pgSQL (sql/guards/transitions.sql), and the transition counters of workflows and commands
-- count per statement from transition tables instead of once per row (sql/metrics/counters.sql),
-- and issue_commands issues the commands of a group of workflow steps in one UPDATE and one INSERT
-- (sql/commands/issue.sql; the step lane sends a group's issue_command calls as one).
--
-- Expand only: triggers replaced, two trigger function bodies replaced with their signatures
-- unchanged, one new function; what is counted and what is refused are unchanged.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/guards/transitions.sql
-- #include sql/metrics/counters.sql
-- #include sql/commands/issue.sql

select bitrix_sync.apply_privileges();
