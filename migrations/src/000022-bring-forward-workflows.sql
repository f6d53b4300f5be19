-- Recovery after a portal outage covers workflows too (issue 14): a command past its own retries that
-- was handed back to its workflow with a portal-wide error code left the workflow in waiting_retry
-- until its backoff ran out, minutes after the portal answered again. bring_forward_commands() now
-- makes those workflows due as well when it is called without a limit. Same signature and privileges.
set local lock_timeout = '10s';

-- #include sql/commands.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
