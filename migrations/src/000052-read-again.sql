-- Follow-ups of 000049-000051 (issue 36, fifth and sixth rounds), in a migration of their own so
-- that those three keep the text databases applied.
--
-- - take_sync_tasks() (sql/workflows/take.sql): the set path's check that a user has no active
--   workflow is one probe per user (LATERAL ... LIMIT 1). Written as NOT EXISTS, stale statistics
--   let the planner join the whole index of active workflows to every user of a batch (bench:scale
--   at 10 M users: 102 658 buffers a batch of 50; intake-batch-plan.test.ts). The single call is
--   written once.
-- - complete_commands() finds the registered flag's Contact once; issue_commands() finds a
--   workflow named twice in its refusal path; open_mapping() moves to sql/mapping/open.sql, and
--   bring_forward_commands() and release_command() to sql/commands/release.sql.
-- Expand only: bodies and comments replaced, same signatures and results. Locks: catalogue rows.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/workflows/read_again.sql
-- #include sql/commands/issue_many.sql
-- #include sql/commands/complete.sql
-- #include sql/mapping/open.sql
-- #include sql/mapping/links_many.sql
-- #include sql/workflows/take.sql
select bitrix_sync.apply_privileges();
