-- A workflow step starts with one call (issue 14): step_context() locks the workflow row and reads
-- its revision, then, in a statement of its own after the lock, the last command and whether a write
-- is unresolved. The service made two round trips for this on every step.
set local lock_timeout = '10s';

-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
