-- Leaner intent writes on the App's hot path (issue 14; docs/performance-intent-writes.md): the
-- enqueue triggers decide in their WHEN clauses, the trigger function writes the intent without
-- whole-row JSON, the wake-up NOTIFY is sent only while a sync loop sleeps on the intake watch, and
-- the claim index covers only live intents.
set local lock_timeout = '10s';

-- #include sql/enqueue.sql

-- The claim index keeps the spec's columns (status, next_attempt_at, created_at) but only the live
-- states (the ones claim_sync_tasks and status_queue read): finished history (processed, cancelled),
-- most of the table, is not in it, and a completion (leased -> processed) writes no entry into it.
-- A deviation from §6.1's full index, documented in docs/workflows.md. The build reads the table
-- under a SHARE lock, which holds App writes that record intents for as long as the scan takes;
-- retention keeps the table to its live rows and recent history.
-- squawk-ignore require-concurrent-index-creation
create index if not exists sync_queue_claim_live_idx on han_app.sync_queue (status, next_attempt_at, created_at)
  where status in ('pending', 'leased', 'retry_wait', 'dead_letter');
comment on index han_app.sync_queue_claim_live_idx is
  'Claim order (§6.1 columns status, next_attempt_at, created_at) over live intents only; finished rows are not indexed (issue 14).';
-- squawk-ignore require-concurrent-index-deletion
drop index if exists han_app.sync_queue_claim_idx;

-- #include sql/privileges.sql
-- #include sql/grants.sql
