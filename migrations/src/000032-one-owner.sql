-- One owner per decision. No table changes; functions only, all replaced in place (no signature
-- changes, nothing dropped: the previous release's code calls every function it called before).
-- - _dead_letter(): the one writer of technical_dead_letters rows, called by the six functions that
--   wrote their own (_dead_letter_command_row, resolve_command_reconcile twice,
--   _dead_letter_sync_task_row, _dead_letter_webhook_row, schedule_workflow_retry); the rows are the
--   same.
-- - send_commands() stamps deadline_at with _retry_deadline() instead of its own copy of the horizon.
-- - due_commands(): the pump's backlog query, beside claim_commands() whose rows it counts.
-- - The comments of the command functions say what src/workflows/decide/unanswered-write.ts decides
--   for a write that got no answer.
set local lock_timeout = '10s';

-- #include sql/retry.sql
-- #include sql/commands.sql
-- #include sql/queue.sql
-- #include sql/webhooks.sql
-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
