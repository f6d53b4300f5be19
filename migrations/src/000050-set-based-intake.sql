-- The intake's starts set-based (issue 36, fifth round; sql/workflows/take.sql).
--
-- take_sync_tasks() took a claimed batch by calling start_or_join_workflow() once per intent: a
-- locked lookup of the user's active workflow, a check against the user's last workflow and an
-- INSERT, each statement paying PostgreSQL's fixed cost for one row. Now the intents whose user the
-- batch names once and who has no active workflow (most of a backlog) are checked by one query and
-- started by one INSERT per run of them in the batch's order; the others (an active workflow to
-- join, a rebind to hold the intent on, several intents of one user, or a workflow another intake
-- started a moment ago) go through start_or_join_workflow() in their place as before, so the users'
-- workflows are locked in the batch's order, as they were. Its results, its refusals (BS001, BS004)
-- and its signature are unchanged.
--
-- take_sync_tasks() moves from sql/workflows/start.sql to its own file, sql/workflows/take.sql.
-- Expand only: one function's body and comment replaced; the release before this one calls it as
-- before. Locks and time: catalogue rows only (the function, its comment, its privilege decision).
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/workflows/take.sql
select bitrix_sync.apply_privileges();
