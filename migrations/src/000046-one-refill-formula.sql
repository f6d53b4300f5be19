-- One token bucket formula for both budgets (issue 31): the tokens a bucket holds now and the share
-- of the rate in force after a cut were written out in acquire_crm_request, acquire_spare_crm_request
-- and the two feedback functions; they now call _bucket_tokens and _bucket_rate_factor
-- (sql/limiter/refill.sql). The same arithmetic: what the limiter grants does not change.
--
-- Expand only: two new internal functions; four function bodies replaced with their signatures and
-- results unchanged. No table is locked.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/limiter/refill.sql
-- #include sql/limiter/acquire.sql
-- #include sql/limiter/feedback.sql
-- #include sql/limiter/spare.sql
select bitrix_sync.apply_privileges();
