-- updated_at maintenance, shared by every table of schema bitrix_sync that has the column: a
-- BEFORE UPDATE trigger stamps it with the transaction time, unless the statement stamped it itself.
-- The engine's hot statements (claims, issue, send, completion, a step's transition) set
-- updated_at = now() and so run no PL/pgSQL per row for it (issue 36): the WHEN clause lets the
-- trigger fire only when updated_at kept its old value, so any other statement is stamped as ever.
-- A statement that sets it in a transaction that stamped the row already fires it and gets the same
-- value.

create or replace function bitrix_sync.tg__set_updated_at() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  new.updated_at := now();
  return new;
end $$;
comment on function bitrix_sync.tg__set_updated_at() is
  'BEFORE UPDATE trigger: stamps updated_at with the transaction time. Its triggers fire only when the statement left updated_at as it was.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

do $$
declare
  v_table text;
begin
  foreach v_table in array array['entity_external_mapping', 'workflow_instances', 'crm_commands', 'business_alerts',
                                 'rebind_requests', 'contact_snapshots', 'reconciliation_cursors']
  loop
    execute format('drop trigger if exists _900_set_updated_at on bitrix_sync.%I', v_table);
    execute format('create trigger _900_set_updated_at before update on bitrix_sync.%I
                      for each row when (new.updated_at is not distinct from old.updated_at)
                      execute function bitrix_sync.tg__set_updated_at()', v_table);
    execute format('comment on trigger _900_set_updated_at on bitrix_sync.%I is %L', v_table,
                   'Stamps updated_at on every change whose statement did not set it (WHEN: it kept its old value).');
  end loop;
end $$;
