-- Retention of han_app.sync_queue at scale (docs/performance.md, "Scale"): finished intents get an
-- index on completed_at, and delete_retention_batch('queue') takes the oldest first through it, as
-- the webhook, command and workflow batches do through theirs. Before, the batch read the queue's
-- whole retained history (30 days of intents) to find rows past retention.queue_days; bench:scale
-- measured it growing with the installation (a Seq Scan of han_app.sync_queue).
--
-- The build reads the table once under SHARE: it holds up the service's fold and claims for as long
-- (the App's transactions append to han_app.sync_queue_journal and do not wait), a few seconds for a
-- million finished intents. In a transaction, so not CONCURRENTLY.
set local lock_timeout = '10s';

-- squawk-ignore require-concurrent-index-creation
create index if not exists sync_queue_finished_idx on han_app.sync_queue (completed_at)
  where status in ('processed', 'cancelled', 'dead_letter');
comment on index han_app.sync_queue_finished_idx is
  'Finished intents (processed, cancelled, dead_letter) by completion time: retention deletes the oldest first (bitrix_sync.delete_retention_batch(''queue'')).';

-- #include sql/retention.sql
