-- Engine efficiency, issue 14 (docs/performance.md, second and third rounds), after 000024:
-- - fenced transitions test the state with IS NOT DISTINCT FROM, so they find their row by primary
--   key whatever the statistics say (the notes at the top of sql/commands.sql and sql/workflows.sql);
-- - step_context() returns one composite value (type step_context_t) from PL/pgSQL, which keeps its
--   plans for the session (sql/workflows.sql drops and recreates it: its return type changes);
-- - apply_crm_master_fields() refuses, under the snapshot row's lock, a read older than the
--   snapshot: two steps of one step group can both read a snapshot before either writes it
--   (sql/snapshots.sql, src/db/statement-batcher.ts).
-- Signatures are unchanged except step_context's return type.
set local lock_timeout = '10s';

-- #include sql/commands.sql
-- #include sql/workflows.sql
-- #include sql/snapshots.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
