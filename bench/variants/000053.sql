-- A variant for BENCH_SETUP_SQL: migration 000053's defaults as it left them, for a database kept for
-- bench:scale --large-db on which bench/variants/before-000053.sql was applied in an earlier run.
alter table han_app.sync_queue alter column id set default bitrix_sync.time_ordered_uuid();
alter table bitrix_sync.workflow_instances alter column id set default bitrix_sync.time_ordered_uuid();
alter table bitrix_sync.entity_external_mapping alter column id set default bitrix_sync.time_ordered_uuid();
alter table bitrix_sync.rebind_requests alter column id set default bitrix_sync.time_ordered_uuid();
