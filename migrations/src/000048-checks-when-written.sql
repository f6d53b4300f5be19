-- Row checks that cost the engine less (issue 36, third round; sql/guards/checks.sql).
--
-- The CHECKs of workflow_instances become triggers that PostgreSQL reads only when a statement
-- writes their columns. PostgreSQL 15 reads every CHECK of a table again from its stored text,
-- simplifies and compiles it for every INSERT and UPDATE statement, whatever columns the statement
-- sets; the engine moves workflows one row per statement (a step's transition, an issued command, a
-- wake-up), and the ten CHECKs were 30-45 % of such an UPDATE. Each is now a BEFORE INSERT OR UPDATE
-- OF <its columns> trigger, ENABLE ALWAYS, whose WHEN clause is NOT (<the rule>): the same rule on
-- the same row, the same SQLSTATE (23514) and constraint name when it refuses, for every writer
-- (session_replication_role = replica too).
--
-- _trace_context() (inlined into every command, workflow and inbox insert) and _check_code() test
-- their forms without counted repetition, which PostgreSQL's regular expressions pay for on every
-- value: 9.8 -> 6.1 µs and 7.7 -> 4.3 µs a call. The same strings pass. (A CHECK or trigger WHEN is
-- read again per statement, where the longer rule costs more to compile than it saves on one row:
-- those keep the regular expression.)
--
-- metric_events loses its CHECK on machine, written as an ARRAY[] of casts: it was compiled for every
-- counted transition (2.7 per CRM command, each its own INSERT from a row trigger) and cost 8-10 µs
-- of the 25 the workflow counter takes per transition. Only the five security definer counter
-- triggers write the table (no role holds a privilege on it), each with its machine as a literal;
-- test/integration/checks-when-written.test.ts checks those literals against the same rule, which
-- metric_event_totals keeps where metrics_snapshot() folds the events.
--
-- Expand only: the rules are the ones dropped, so a row an earlier release writes is admitted as
-- before; function signatures and results unchanged. Existing rows are not read again (several
-- CHECKs were NOT VALID already).
-- Locks and time: the triggers take SHARE ROW EXCLUSIVE on workflow_instances, the drops ACCESS
-- EXCLUSIVE on it and on metric_events; catalogue changes only, no scan and no rewrite, held to
-- the commit.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/common/codes.sql
-- #include sql/common/tracing.sql
-- #include sql/guards/checks.sql
alter table bitrix_sync.workflow_instances
  drop constraint workflow_instances_workflow_type_check,
  drop constraint workflow_instances_intent_type_check,
  drop constraint workflow_instances_state_check,
  drop constraint workflow_instances_finished,
  drop constraint workflow_instances_lease,
  drop constraint workflow_instances_held_intent,
  drop constraint workflow_instances_attempt_count_check,
  drop constraint workflow_instances_revision_check,
  drop constraint workflow_instances_processed_revision_check,
  drop constraint workflow_instances_trace_context_chk;
alter table bitrix_sync.metric_events drop constraint metric_events_machine_check;
select bitrix_sync.apply_privileges();
