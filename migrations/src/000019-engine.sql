-- Engine efficiency (issue 14): a step persists its state and its command in one call
-- (issue_command takes the step state), the pump settles a batch in one statement
-- (complete_commands), and retries that wait only because the whole portal failed are brought
-- forward when it answers again (bring_forward_commands); a reply to a request sent under a cut
-- rate doubles the rate back (note_crm_answered); the state guard no longer turns rows into JSON.
set local lock_timeout = '10s';

-- #include sql/state_machines.sql
-- #include sql/commands.sql
-- #include sql/limiter.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
