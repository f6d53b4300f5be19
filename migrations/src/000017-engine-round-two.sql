-- The engine's second round (issue 14; docs/performance.md, "Second round"):
-- - bring_forward_commands() also makes waiting_retry workflows with a portal-wide error code due
--   when the portal answers again (sql/commands.sql);
-- - take_sync_tasks(): intake takes a claimed batch in one call (sql/workflows.sql);
-- - step_context() and its result type step_context_t: a step starts with one call that locks the
--   workflow row, then reads its revision, last command and unresolved writes (sql/workflows.sql);
-- - fenced transitions test the state with IS NOT DISTINCT FROM, so they find their row by primary
--   key whatever the statistics say (the note at the top of sql/commands.sql);
-- - the privilege catalogue's rows for the two new functions, applied by sql/grants.sql.
-- Signatures of existing functions are unchanged.
set local lock_timeout = '10s';

-- #include sql/commands.sql
-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
