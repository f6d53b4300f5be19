-- Engine efficiency (issue 14): a step persists its state and its command in one call
-- (issue_command takes the step state), the pump settles a batch in one statement
-- (complete_commands), and retries that wait only because the whole portal failed are brought
-- forward when it answers again (bring_forward_commands).
set local lock_timeout = '10s';

-- #include sql/state_machines.sql
-- #include sql/commands.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
