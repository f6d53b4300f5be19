-- The privilege decisions (sql/privileges/) on the tables and sequences of contract/; the table itself
-- is written by the migration that creates it (000037).
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.crm_contract_probes', array[]::text[], array['SELECT'], array[]::text[],
   'Passed write probes (npm run preflight -- --write); never changed, the admin reads the history.'),
  ('sequence', 'bitrix_sync.crm_contract_probes_id_seq', array[]::text[], array[]::text[], array[]::text[],
   'Identity of crm_contract_probes.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
