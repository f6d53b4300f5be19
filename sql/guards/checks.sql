-- Row checks that PostgreSQL reads only when their columns are written (issue 36, third round).
-- A table's CHECK constraints are read again from their stored text, simplified and compiled for
-- every INSERT and every UPDATE statement, whatever columns the statement sets. On
-- workflow_instances, which the engine moves one row per statement (a step's transition, an issued
-- command, a wake-up), its ten CHECKs were 30-45 % of such an UPDATE's cost: 60-75 µs a
-- statement with them, 33-45 µs with these triggers (docs/performance.md). Each former CHECK is a
-- BEFORE INSERT OR UPDATE OF <its columns> trigger whose WHEN clause is NOT (<the check>): an
-- UPDATE that sets none of its columns never reads it, one that does evaluates the same expression
-- on the same row, and a row the CHECK admitted (true or null) is admitted.
--
-- What holds as a CHECK held:
-- - The triggers are ENABLE ALWAYS: they fire for every writer, with session_replication_role =
--   replica too (a restore, a logical subscriber, the tests' forced rows). Only ALTER TABLE ...
--   DISABLE TRIGGER by the table's owner turns one off, as only the owner can drop a CHECK.
-- - They are named _980_check_*, after every other BEFORE trigger of the table, so they judge the
--   row those triggers leave; none of those writes a column checked here (updated_at is not).
-- - A refusal is SQLSTATE 23514 (check_violation) with the constraint name the CHECK had, and,
--   unlike PostgreSQL's own message, no "Failing row contains": a row's values stay out of the
--   message and the server log.
-- - Existing rows are not read again, as a NOT VALID CHECK (which several of these were).
--
-- The other tables keep their CHECKs: an INSERT reads every check either way (a trigger costs a few
-- µs more than a CHECK there), and the engine's UPDATEs of crm_commands, han_app.sync_queue and the
-- inbox move up to 50 rows a statement, so their CHECKs are read once for many rows.
-- TG_ARGV[0]: the check's name; TG_ARGV[1]: what it requires, in words.

create or replace function bitrix_sync.tg__refuse_check() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
-- TG_ARGV[0]: the check's name; TG_ARGV[1]: what it requires, in words. The WHEN clause decides.
begin
  raise exception 'new row for relation "%" violates check constraint "%"', tg_table_name, tg_argv[0]
    using errcode = 'check_violation', constraint = tg_argv[0], schema = tg_table_schema, table = tg_table_name,
          detail = tg_argv[1],
          hint = 'Write rows through their bitrix_sync function. The check is the trigger _980_check_* on the table (sql/guards/checks.sql).';
end $$;
comment on function bitrix_sync.tg__refuse_check() is
  'BEFORE INSERT OR UPDATE OF <columns> guard, fired by its WHEN clause when a row breaks the check named TG_ARGV[0] (a CHECK kept as a trigger so that UPDATEs of other columns do not read it). SQLSTATE 23514 with that constraint name; the row''s values are not in the message.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__refuse_check()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- workflow_instances (§7.1). Migration 000048 dropped the CHECKs of the same names.
drop trigger if exists _980_check_workflow_type on bitrix_sync.workflow_instances;
create trigger _980_check_workflow_type
  before insert or update of workflow_type on bitrix_sync.workflow_instances for each row
  when (not (new.workflow_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_workflow_type_check',
    'workflow_type is contact.map_or_create, contact.update, contact.deactivate or contact.rebind.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_workflow_type;
comment on trigger _980_check_workflow_type on bitrix_sync.workflow_instances is
  'Check workflow_instances_workflow_type_check: the four workflow kinds (§7.1).';

drop trigger if exists _980_check_intent_type on bitrix_sync.workflow_instances;
create trigger _980_check_intent_type
  before insert or update of intent_type on bitrix_sync.workflow_instances for each row
  when (not (new.intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_intent_type_check',
    'intent_type is contact.map_or_create, contact.update, contact.deactivate or contact.rebind.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_intent_type;
comment on trigger _980_check_intent_type on bitrix_sync.workflow_instances is
  'Check workflow_instances_intent_type_check: the intent a workflow serves is one of the four kinds (§6.1).';

drop trigger if exists _980_check_state on bitrix_sync.workflow_instances;
create trigger _980_check_state
  before insert or update of state on bitrix_sync.workflow_instances for each row
  when (not (new.state::text = any ('{created,running,waiting_crm,waiting_retry,waiting_manual,succeeded,failed,cancelled}'::text[])))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_state_check',
    'state is one of the workflow machine''s eight states (docs/state-machines.md).');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_state;
comment on trigger _980_check_state on bitrix_sync.workflow_instances is
  'Check workflow_instances_state_check: the machine''s eight states (§7.1).';

drop trigger if exists _980_check_finished on bitrix_sync.workflow_instances;
create trigger _980_check_finished
  before insert or update of state, finished_at on bitrix_sync.workflow_instances for each row
  when (not ((new.state::text = any ('{succeeded,failed,cancelled}'::text[])) = (new.finished_at is not null)))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_finished',
    'finished_at is set exactly when the state is succeeded, failed or cancelled.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_finished;
comment on trigger _980_check_finished on bitrix_sync.workflow_instances is
  'Check workflow_instances_finished: a workflow has finished_at exactly in a final state (retention sweeps by it).';

drop trigger if exists _980_check_lease on bitrix_sync.workflow_instances;
create trigger _980_check_lease
  before insert or update of lease_token, locked_until on bitrix_sync.workflow_instances for each row
  when (not ((new.lease_token is null) = (new.locked_until is null)))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_lease',
    'lease_token and locked_until are set together or cleared together.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_lease;
comment on trigger _980_check_lease on bitrix_sync.workflow_instances is
  'Check workflow_instances_lease: a lease has a token and an expiry, or neither (§7.1).';

drop trigger if exists _980_check_held_intent on bitrix_sync.workflow_instances;
create trigger _980_check_held_intent
  before insert or update of held_intent_type on bitrix_sync.workflow_instances for each row
  when (not (new.held_intent_type is null
             or new.held_intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_held_intent',
    'held_intent_type is empty, contact.map_or_create, contact.update or contact.deactivate (a rebind is never held).');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_held_intent;
comment on trigger _980_check_held_intent on bitrix_sync.workflow_instances is
  'Check workflow_instances_held_intent: the intent held behind a running workflow is one an intent can carry (§6.1).';

drop trigger if exists _980_check_attempt_count on bitrix_sync.workflow_instances;
create trigger _980_check_attempt_count
  before insert or update of attempt_count on bitrix_sync.workflow_instances for each row
  when (not (new.attempt_count >= 0))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_attempt_count_check', 'attempt_count is 0 or more.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_attempt_count;
comment on trigger _980_check_attempt_count on bitrix_sync.workflow_instances is
  'Check workflow_instances_attempt_count_check: attempts are counted up from 0.';

drop trigger if exists _980_check_revision on bitrix_sync.workflow_instances;
create trigger _980_check_revision
  before insert or update of revision on bitrix_sync.workflow_instances for each row
  when (not (new.revision >= 1))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_revision_check', 'revision is 1 or more.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_revision;
comment on trigger _980_check_revision on bitrix_sync.workflow_instances is
  'Check workflow_instances_revision_check: a workflow starts at revision 1 and a joined intent raises it (§6.2).';

drop trigger if exists _980_check_processed_revision on bitrix_sync.workflow_instances;
create trigger _980_check_processed_revision
  before insert or update of processed_revision on bitrix_sync.workflow_instances for each row
  when (not (new.processed_revision >= 0))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_processed_revision_check',
    'processed_revision is 0 or more.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_processed_revision;
comment on trigger _980_check_processed_revision on bitrix_sync.workflow_instances is
  'Check workflow_instances_processed_revision_check: the revision a pass has served, 0 before the first.';

drop trigger if exists _980_check_trace_context on bitrix_sync.workflow_instances;
create trigger _980_check_trace_context
  before insert or update of trace_context on bitrix_sync.workflow_instances for each row
  when (not (new.trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'))
  execute function bitrix_sync.tg__refuse_check('workflow_instances_trace_context_chk',
    'trace_context is empty or a W3C traceparent of version 00.');
alter table bitrix_sync.workflow_instances enable always trigger _980_check_trace_context;
comment on trigger _980_check_trace_context on bitrix_sync.workflow_instances is
  'Check workflow_instances_trace_context_chk: only a well-formed traceparent is stored and handed on (§16).';
