-- Intake takes a claimed batch of intents in one call (issue 14): take_sync_tasks() starts or joins
-- each intent's workflow and completes its queue row, in one transaction, where the service made
-- five round trips and one commit per intent. The runtime role may execute it (sql/privileges.sql).
set local lock_timeout = '10s';

-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
