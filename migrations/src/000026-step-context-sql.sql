-- step_context() as a SQL function (issue 14): the same two statements (the row lock, then the reads
-- under a fresh snapshot, which a volatile function takes for each statement), without a PL/pgSQL
-- composite OUT variable. Same signature, result and privileges as in 000024.
set local lock_timeout = '10s';

-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
