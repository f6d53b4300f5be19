-- The portal's REST contract, confirmed once against the real portal (issue 34). The forms the REST
-- reference leaves open become settings the write probe names (contract.registered_write,
-- contract.registered_filter, contract.date_filter; documented defaults), and a probe that passed
-- (`npm run preflight -- --write`) records the portal host and the forms it proved. Readiness reports
-- crm_contract_unconfirmed (degraded) until a pass covers the configured portal and the active forms.
--
-- 1. crm_contract_probes: one row per passed probe; written only by record_crm_contract_probe
--    (security definer), read by crm_contract_status / crm_contract_problem (sql/contract/probes.sql).
-- 2. The three settings (sql/settings/keys/contract.sql); the functions and their privilege decisions
--    (sql/contract/).
--
-- Locks and time: a new empty table and catalogue rows; nothing else is touched.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table if not exists bitrix_sync.crm_contract_probes (
  id bigint generated always as identity primary key,
  portal_host text not null constraint crm_contract_probes_host_form
    check (portal_host ~ '^[a-z0-9.-]{1,253}(:[0-9]{1,5})?$'),
  forms jsonb not null constraint crm_contract_probes_forms_object check (jsonb_typeof(forms) = 'object'),
  run_id text not null constraint crm_contract_probes_run_id_form check (run_id ~ '^[0-9a-f]{8,32}$'),
  passed_at timestamptz not null default now(),
  recorded_db_user text not null default session_user
);
comment on table bitrix_sync.crm_contract_probes is
  'Write probes (npm run preflight -- --write) that passed: against which portal, with which contract forms, when and by which login. Readiness is not degraded by crm_contract_unconfirmed once a row covers the configured portal and the active forms.';
comment on column bitrix_sync.crm_contract_probes.portal_host is 'BITRIX_SYNC_PORTAL_HOST of the run, lower case.';
comment on column bitrix_sync.crm_contract_probes.forms is
  'The forms the probe proved: registered_write, registered_filter, date_filter, opened_filter (bitrix_sync.crm_contract_forms()).';
comment on column bitrix_sync.crm_contract_probes.run_id is 'The run id preflight printed; the probe''s throw-away Contacts carried it in their name.';
comment on column bitrix_sync.crm_contract_probes.passed_at is 'When the probe was recorded, after every step passed.';
comment on column bitrix_sync.crm_contract_probes.recorded_db_user is 'The login that recorded it (session_user).';

-- #include sql/settings/keys/contract.sql
-- #include sql/contract/probes.sql
-- #include sql/contract/tables.sql
select bitrix_sync.apply_privileges();
