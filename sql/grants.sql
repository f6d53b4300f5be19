-- Least privilege (§13, DESIGN.md): the privilege catalogue applied, as every migration does at its
-- end (bitrix_sync.apply_privileges(), sql/privileges/apply.sql). A DBA who finds the grants drifted
-- (bitrix_sync.role_privilege_drift, npm run preflight) runs this file as the schema owner:
-- psql -f sql/grants.sql. graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql.
select bitrix_sync.apply_privileges();
