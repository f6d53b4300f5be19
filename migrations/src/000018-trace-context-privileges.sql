-- Trace context across the durable queue (issue 12): a W3C traceparent stored with each workflow
-- (the intent that started or last joined it), each CRM command (the step that issued it) and each
-- inbox event (the receiver request that recorded it), set by the SQL functions that create those
-- rows from a new optional parameter. Null when tracing is off.
set local lock_timeout = '10s';

-- #include sql/tracing.sql

alter table bitrix_sync.workflow_instances add column if not exists trace_context text;
alter table bitrix_sync.crm_commands add column if not exists trace_context text;
alter table bitrix_sync.webhook_inbox add column if not exists trace_context text;

-- The format only, written out rather than through _trace_context(): a CHECK runs with the rights of
-- whoever writes the row, and no role should need a grant on a helper to write these tables. NOT
-- VALID: no scan under the migration's exclusive lock (validating in the same transaction would hold
-- it for the scan). Every existing row has a null context, so nothing unchecked is left; new and
-- updated rows are checked.
alter table bitrix_sync.workflow_instances drop constraint if exists workflow_instances_trace_context_chk,
  add constraint workflow_instances_trace_context_chk
  check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;
alter table bitrix_sync.crm_commands drop constraint if exists crm_commands_trace_context_chk,
  add constraint crm_commands_trace_context_chk
  check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;
alter table bitrix_sync.webhook_inbox drop constraint if exists webhook_inbox_trace_context_chk,
  add constraint webhook_inbox_trace_context_chk
  check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;

comment on column bitrix_sync.workflow_instances.trace_context is
  'W3C traceparent of the intake span of the intent the workflow converges to (the one that started it or last joined it); its steps are traced as its children. Null when tracing was off.';
comment on column bitrix_sync.crm_commands.trace_context is
  'W3C traceparent of the workflow step span that issued the command; each send is traced as its child, whichever process sends it. Null when tracing was off and for alert commands.';
comment on column bitrix_sync.webhook_inbox.trace_context is
  'W3C traceparent of the receiver''s inbox write span for this event; its processing is traced as its child. Null when tracing was off.';

-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/receiver.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
