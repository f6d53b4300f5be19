-- Rights of the runtime role on graphile-worker's and graphile-migrate's own schemas (§13). These
-- schemas are not the project's: graphile-worker creates and upgrades its tables itself, and an
-- upgrade can add tables the runtime role has no rights on. So this file is applied after every
-- migration run (npm run db:migrate and npm start in library mode; `afterAllMigrations` in .gmrc for
-- the graphile-migrate CLI), not only by the migration that last included it. Re-runnable.

-- graphile-worker's schema, when present (the service migrates it before this file runs).
do $$
begin
  if exists (select 1 from pg_namespace where nspname = 'graphile_worker') then
    grant usage on schema graphile_worker to bitrix_sync_user;
    grant select, insert, update, delete on all tables in schema graphile_worker to bitrix_sync_user;
    grant usage, select on all sequences in schema graphile_worker to bitrix_sync_user;
    grant execute on all functions in schema graphile_worker to bitrix_sync_user;
  end if;
end $$;
-- Readiness compares the applied migrations with the committed ones (§14).
do $$
begin
  if exists (select 1 from pg_namespace where nspname = 'graphile_migrate') then
    grant usage on schema graphile_migrate to bitrix_sync_user;
    grant select on graphile_migrate.migrations to bitrix_sync_user;
  end if;
end $$;
-- graphile-worker enables row-level security on its private tables without policies, which leaves
-- them to their owner. The runtime role is not the owner (the migration role is). Its connections
-- run with row_security off (src/db/search-path.ts: a row-security policy on an App table must be an
-- error, never code run with the service's rights), and PostgreSQL then refuses every statement on a
-- table whose row security applies to the role, whatever the policy. So row security goes off on
-- these tables, which only the owner and the runtime role may use anyway (the grants above decide
-- what the runtime may do); the explicit policy stays for a session without the option (a release
-- before 000040, a tool) should a graphile-worker upgrade turn row security on again before this
-- file runs.
do $$
declare
  v_table text;
begin
  for v_table in
    select c.relname from pg_class c
     where c.relnamespace = to_regnamespace('graphile_worker') and c.relkind = 'r' and c.relrowsecurity
  loop
    if not exists (select 1 from pg_policies p
                    where p.schemaname = 'graphile_worker' and p.tablename = v_table
                      and p.policyname = 'bitrix_sync_user_all') then
      execute format('create policy bitrix_sync_user_all on graphile_worker.%I for all to bitrix_sync_user using (true) with check (true)',
                     v_table);
    end if;
    execute format('alter table graphile_worker.%I disable row level security', v_table);
  end loop;
end $$;
