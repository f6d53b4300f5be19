-- Fenced transitions find their row by primary key whatever the statistics say (issue 14): the
-- state tests of the single-row updates in sql/workflows.sql and sql/commands.sql are written so that
-- the planner cannot serve them from a live-state partial index (see the note in those files). Same
-- signatures, same results; only the plans change.
set local lock_timeout = '10s';

-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
