-- Time-ordered keys (issue 36, goal 4; sql/common/ids.sql says why). New keys of the queue, the
-- workflows, the mappings and the rebind requests are version 7 UUIDs, so the rows a running service
-- works on share the newest leaves of the key indexes and of those that carry the keys elsewhere.
-- Existing keys keep their values. Expand only: the previous release inserts without naming a key.
-- Locks: each SET DEFAULT is a catalogue change under its table's lock (no rewrite, no scan).
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/common/ids.sql

alter table han_app.sync_queue alter column id set default bitrix_sync.time_ordered_uuid();
alter table bitrix_sync.workflow_instances alter column id set default bitrix_sync.time_ordered_uuid();
alter table bitrix_sync.entity_external_mapping alter column id set default bitrix_sync.time_ordered_uuid();
alter table bitrix_sync.rebind_requests alter column id set default bitrix_sync.time_ordered_uuid();

select bitrix_sync.apply_privileges();
