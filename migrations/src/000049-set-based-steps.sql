-- The issues, the transitions and the new links of a group of workflow steps, each in one call
-- (issue 36, fourth round; sql/commands/issue_many.sql, sql/workflows/events_many.sql,
-- sql/mapping/links_many.sql).
--
-- issue_commands() does what issue_command() does for many workflows at once: one UPDATE moves the
-- workflows running -> waiting_crm under their lease tokens, one INSERT adds their commands, in the
-- caller's order. The step lane sends the issues of a group of steps as one call of it
-- (src/db/statement-batcher.ts, set forms), where each issue_command() ran two single-row statements
-- and paid PostgreSQL's fixed cost per statement (executor start-up, the tables' trigger WHEN clauses
-- and CHECKs read again, indexes opened) once per step. All or nothing, as the grouped calls were: a
-- stale lease refuses the whole call (BS001) and the lane runs each step again alone.
--
-- fire_workflow_events() does the same for fire_workflow_event(): the group's rows are checked in the
-- caller's order (the first refusal is the one the calls one after the other would raise) and moved
-- by one UPDATE, each along the edge its event names. open_mappings() does it for open_mapping():
-- one INSERT of the group's links (one subtransaction for the group, where each open_mapping() call
-- opened its own for its unique_violation handler) and one read of the inbox for their Contacts.
--
-- open_mapping() (and open_mappings() with it) also queues the extra read of a Contact whose robot
-- call was answered unknown_mapping since the Contact's last link closed, when that is earlier than
-- the workflow's start: an edit made while the Contact had no link is the user's again once linked
-- (drill:rollback found one lost until the reconciliation, after a pass restarted for a newer
-- intent ended without the read that applies it).
--
-- Expand only: four new functions (the three set functions and _read_again_after_link(), the
-- extra-read rule both link functions share), and open_mapping()'s body and comment replaced with
-- its signature and result unchanged. issue_command(), fire_workflow_event() and open_mapping() are still
-- used by a step run alone, and the release before this one runs on them as before.
-- Locks and time: catalogue rows only (functions, their comments, privilege decisions and grants);
-- no table is locked beyond apply_privileges()' own reads.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/workflows/events_many.sql
-- #include sql/commands/issue_many.sql
-- #include sql/mapping/links.sql
-- #include sql/mapping/links_many.sql
select bitrix_sync.apply_privileges();
