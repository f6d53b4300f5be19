-- The project's two tables in the App's schema (docs/security.md, "The App's tables"): han_app's
-- owner, usually the App's, may drop any table in it (DROP ... CASCADE, the dependent views with it)
-- and put one of its own in its place, with triggers of its own. The functions that write these
-- tables would then run that code with their rights: the runtime's, or the schema owner's in the
-- security definer ones (the App's intent trigger, the fold). Each calls this first, so such a
-- table is an error, never code run with the project's rights. One catalogue read, no lock; the
-- App's intent trigger, on the App's own write path, checks the journal inline instead
-- (sql/intake/app_trigger.sql).

create or replace function bitrix_sync._check_queue_tables() returns void
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_ours integer;
begin
  select count(*)::integer into v_ours
    from pg_catalog.pg_class c, pg_catalog.pg_namespace n
   where n.nspname = 'bitrix_sync'
     and c.oid in (pg_catalog.to_regclass('han_app.sync_queue'), pg_catalog.to_regclass('han_app.sync_queue_journal'))
     and c.relkind = 'r' and c.relowner = n.nspowner;
  if v_ours <> 2 then
    raise exception 'han_app.sync_queue or han_app.sync_queue_journal is no longer the project''s own table'
      using errcode = 'BS097',
            hint = 'Someone dropped it and made another in its place (the owner of schema han_app may): nothing is written to it. select * from bitrix_sync.app_table_hooks() names it; restore the table from the migrations with the DBA (docs/security.md, "The App''s tables").';
  end if;
end $$;
comment on function bitrix_sync._check_queue_tables() is
  'Internal: BS097 unless han_app.sync_queue and han_app.sync_queue_journal are ordinary tables owned by the owner of schema bitrix_sync. Called first by every function that writes them, so that a table the owner of han_app put in their place never runs its code with the project''s rights.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._check_queue_tables()', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the functions that write han_app.sync_queue and its journal (the runtime''s among them).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
