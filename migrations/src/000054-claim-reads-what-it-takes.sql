-- The claim reads what it takes (issue 36). claim_sync_tasks() sorted every due intent of the
-- backlog on each call to take p_limit of them: 5 ms a claim of 40 beside 3 000 pending intents,
-- 16-24 ms beside 30 000, so draining a backlog of n intents read about n * n / p_limit rows. It now
-- walks the claim index in order once per status (pending, due retries) and stops at p_limit rows,
-- then merges them with the expired leases as before: the same rows in the same order, about 1 ms of
-- statement time whatever the backlog. The function moves to its own file, sql/queue/claim.sql.
-- Locks: CREATE OR REPLACE FUNCTION only.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/queue/claim.sql

select bitrix_sync.apply_privileges();
