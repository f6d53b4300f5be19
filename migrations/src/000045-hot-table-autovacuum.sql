-- Autovacuum on the service's hot tables at 10 M users (issue 36; docs/deployment.md, "PostgreSQL
-- settings"). PostgreSQL's defaults vacuum a table once a fifth of it is dead and analyse it once a
-- tenth has changed: on a queue or workflow history of millions of rows that is millions of dead
-- entries in the partial live indexes the claims walk before a vacuum comes, and statistics a day
-- old. These tables are written on every intent, step and command, and retention deletes from them
-- in batches: they are vacuumed after 2 % (the snapshots, marks and mappings, updated more slowly,
-- after 5 %) and analysed after 1 % (2 %), inserts included (the visibility map the index-only scans
-- need stays current), with a shorter cost delay than the server's.
-- han_app.sync_queue_journal keeps its own (000026). The App's tables (han_app.user_identity,
-- client_profile) are the App owner's: docs/deployment.md gives the statement for its DBA.
--
-- Locks and time: storage parameters only (SHARE UPDATE EXCLUSIVE, which reads and writes do not
-- wait for; no rewrite).
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table han_app.sync_queue set (
  autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 1000,
  autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 1);
alter table bitrix_sync.workflow_instances set (
  autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 1000,
  autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 1);
alter table bitrix_sync.crm_commands set (
  autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 1000,
  autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 1);
alter table bitrix_sync.webhook_inbox set (
  autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 1000,
  autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 1);
alter table bitrix_sync.contact_snapshots set (
  autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02);
alter table bitrix_sync.entity_external_mapping set (
  autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02);
alter table bitrix_sync.audit_marks set (
  autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02);

select bitrix_sync.apply_privileges();
