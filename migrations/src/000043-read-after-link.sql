-- A robot's call that came while a link was being made is read again once the link stands (found by
-- drill:rollback: a manager edited a Contact 60 ms after the service created it; the robot's call was
-- processed before the link committed, answered unknown_mapping, and the edit waited for the next
-- reconciliation). open_mapping (sql/mapping/links.sql) now queues one more read of the Contact (a
-- webhook event `linked`) when one of its events is unprocessed or was answered unknown_mapping
-- since the workflow that links it began. The previous release calls open_mapping the same way and
-- gets the same repair.
--
-- The runtime may now name the event type of a row it inserts (linked), as the receivers do.
--
-- Expand only: one function body replaced (signature and result unchanged), one partial index, one
-- column privilege more for the runtime.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/mapping/links.sql
-- #include sql/webhooks/tables.sql
select bitrix_sync.apply_privileges();

-- Last, so that the receivers' inserts wait only for the index build (milliseconds on a table that
-- retention keeps small), not for the whole migration: a lock taken earlier is held until the
-- commit, and apply_privileges takes seconds (drill:rollback saw receivers refused 503 for it).
-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_unknown_mapping_idx on bitrix_sync.webhook_inbox (entity_id, received_at)
  where outcome = 'unknown_mapping';
comment on index bitrix_sync.webhook_inbox_unknown_mapping_idx is
  'open_mapping: the Contact''s robot calls answered unknown_mapping while its link was being made.';
