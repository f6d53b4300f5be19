-- A variant for BENCH_SETUP_SQL (npm run bench:scale, bench:engine, bench:peers, bench:e2e): migration
-- 000053's time-ordered keys undone on a database at 000053, so the two can be run alternately in one
-- session: new keys of the queue, workflows, mappings and rebind requests random again, as
-- gen_random_uuid() made them before. On a database kept for bench:scale --large-db the variant stays
-- until undone: bench/variants/000053.sql puts 000053's defaults back. docs/performance.md, "Issue
-- 36, sixth round".
alter table han_app.sync_queue alter column id set default gen_random_uuid();
alter table bitrix_sync.workflow_instances alter column id set default gen_random_uuid();
alter table bitrix_sync.entity_external_mapping alter column id set default gen_random_uuid();
alter table bitrix_sync.rebind_requests alter column id set default gen_random_uuid();
