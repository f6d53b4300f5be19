-- One more read of a Contact whose registration flag the service turned on again (issue 36's
-- drills; sql/workflows/read_again.sql, sql/commands/complete.sql).
--
-- A robot call about a linked Contact whose registration flag is off is answered
-- registration_inactive and applies nothing (§5.5 step 5). When a user is deactivated and comes
-- back, the workflow links the Contact again when its pass finds it and writes the flag on a step
-- later; a manager's edit in between was dropped until the reconciliation (drill:rollback found one:
-- the flag's write waited out a pause, and the robot's calls were answered meanwhile).
-- complete_command() and complete_commands() now apply the rule open_mapping() applies after a link
-- to a write that turned the flag on: one more read of the Contact when a robot call about it is
-- unprocessed, or was answered unknown_mapping or registration_inactive since the workflow began
-- or since the Contact's last link closed. _read_again_after_link() moves from
-- sql/mapping/links.sql to sql/workflows/read_again.sql, below both families, and matches the new
-- outcome through its own partial index.
--
-- Expand only: three bodies and comments replaced with their signatures and results unchanged, and
-- one partial index. The release before this one runs on them as before.
-- Locks and time: catalogue rows for the functions; the index, built last, holds SHARE on
-- webhook_inbox (receivers' inserts wait) only for its build, milliseconds on a table retention
-- keeps small.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/workflows/read_again.sql
-- #include sql/commands/complete.sql
select bitrix_sync.apply_privileges();

-- Last, so that the receivers' inserts wait only for the index build, not for the whole migration
-- (000043's index, the same way).
-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_registration_inactive_idx on bitrix_sync.webhook_inbox (entity_id, received_at)
  where outcome = 'registration_inactive';
comment on index bitrix_sync.webhook_inbox_registration_inactive_idx is
  '_read_again_after_link: the Contact''s robot calls answered registration_inactive before the service turned its flag on again.';
