-- The App's intents go into a journal (issue 14, bench:trigger; docs/performance.md, "Intent writes,
-- second round"): han_app.enqueue_contact_sync() appends one row to han_app.sync_queue_journal, a
-- table with no index, constraint or trigger, instead of an INSERT ... ON CONFLICT into
-- han_app.sync_queue with its five indexes, four CHECKs and state guard. The intent is still written
-- in the App's own transaction. bitrix_sync.fold_intent_journal() coalesces the journal into
-- sync_queue (one row per task and user, a leased row fenced by a newer intent) at the start of
-- every claim_sync_tasks() and perform_cutover(); status_queue counts unfolded intents as pending.
-- A deviation from §6.2 (the trigger writes sync_queue), documented in docs/workflows.md.
set local lock_timeout = '10s';

-- Append-only hand-off, read whole by one folder at a time: no primary key and no index on purpose
-- (each would cost every App write an index entry), and its rows live until the next claim.
create table if not exists han_app.sync_queue_journal (
  task_type text not null,
  user_id uuid not null,
  reason text not null,
  source_updated_at timestamptz,
  recorded_at timestamptz not null default clock_timestamp()
) with (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0,
        autovacuum_vacuum_insert_threshold = 100000);
comment on table han_app.sync_queue_journal is
  'Intents recorded by han_app.enqueue_contact_sync() in the App''s transaction and not yet folded into han_app.sync_queue by bitrix_sync.fold_intent_journal() (before every claim). No key or index on purpose: it is appended by the App''s writes and taken whole.';
comment on column han_app.sync_queue_journal.task_type is 'contact.map_or_create, contact.update or contact.deactivate, as the trigger decided.';
comment on column han_app.sync_queue_journal.user_id is 'user_identity.id of the user the intent is about.';
comment on column han_app.sync_queue_journal.reason is 'Why the trigger recorded it (identity_phone_changed, profile_created, ...): the queue payload''s reason.';
comment on column han_app.sync_queue_journal.source_updated_at is 'updated_at of the App row that fired the trigger.';
comment on column han_app.sync_queue_journal.recorded_at is 'When the trigger ran (clock time, after the App row''s lock): the queue row''s created_at and first due time.';

-- #include sql/enqueue.sql
-- #include sql/queue.sql
-- #include sql/cutover.sql
-- #include sql/status.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
