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
-- - Parameter defaults that copied numbers the service owns go (the claim sizes and lease of the
--   settings, the limiter's adaptive constants of src/crm/limiter.ts): the service passes every
--   argument, and so does the previous release, so one side owns each number. CREATE OR REPLACE
--   cannot remove a default: each function is dropped here and created again by its sql/ file below,
--   in this transaction, with the same signature, comment and grants.
set local lock_timeout = '10s';

drop function if exists bitrix_sync.claim_commands(text, integer, interval);
drop function if exists bitrix_sync.claim_sync_tasks(text, integer, interval);
drop function if exists bitrix_sync.claim_webhooks(text, integer, interval, text);
drop function if exists bitrix_sync.claim_workflows(text, integer, interval);
drop function if exists bitrix_sync.alerts_to_look_up(integer);
drop function if exists bitrix_sync.acquire_crm_request(text, text, double precision, integer, integer, integer,
  double precision);
drop function if exists bitrix_sync.acquire_spare_crm_request(text, text, double precision, integer, integer,
  double precision, integer, double precision);
drop function if exists bitrix_sync.note_crm_answered(text, double precision, double precision);
drop function if exists bitrix_sync.note_rate_limited(text, double precision, double precision, integer,
  double precision);

-- #include sql/retry.sql
-- #include sql/limiter.sql
-- #include sql/alert_mirror.sql
-- #include sql/commands.sql
-- #include sql/queue.sql
-- #include sql/webhooks.sql
-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
