-- Leaner intent writes on the App's hot path (issue 14; docs/performance.md, "Intent writes"): the
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

-- The same CHECKs on the intents, written so that their stored expression is small: PostgreSQL
-- parses every CHECK of a table from its stored text (and simplifies it) again for each INSERT or
-- UPDATE statement, and an IN list over varchar is stored as an array of casts that makes the
-- trigger's one INSERT pay that again and again. `status::text = any ('{...}'::text[])` admits
-- exactly the values `status in (...)` admits. Replacing them takes the table's exclusive lock for
-- the validation scan of the rows retention keeps (every existing row satisfied the same condition).
alter table han_app.sync_queue drop constraint if exists sync_queue_status_check,
  -- squawk-ignore constraint-missing-not-valid
  add constraint sync_queue_status_check
  check (status::text = any ('{pending,leased,processed,retry_wait,dead_letter,cancelled}'::text[]));
alter table han_app.sync_queue drop constraint if exists sync_queue_task_type_check,
  -- squawk-ignore constraint-missing-not-valid
  add constraint sync_queue_task_type_check
  check (status::text = any ('{processed,dead_letter,cancelled}'::text[])
         or task_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[]));

-- #include sql/privileges.sql
-- #include sql/grants.sql
