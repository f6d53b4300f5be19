-- The privilege decisions (sql/privileges/) on the tables of compatibility/; the table itself is
-- written by the migration that creates it (000042), and its rows by the contract migrations.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.schema_contract_steps', array[]::text[], array['SELECT'], array[]::text[],
   'Written by contract migrations only (the schema owner); the runtime reads the floor through status_schema, the admin reads the steps.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
