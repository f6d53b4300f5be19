-- Least privilege (§13, DESIGN.md): the catalogue applied. Everything is revoked from the four
-- roles and PUBLIC on the project's objects, then exactly what bitrix_sync.role_privileges lists is
-- granted. Every migration ends with one line, select bitrix_sync.apply_privileges();, so a new
-- object gets its rights (and PUBLIC loses the EXECUTE a new function is created with) in the same
-- transaction. graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after
-- every migration run.

create or replace function bitrix_sync.apply_privileges() returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A decision naming no object, or an object of the project without a decision for a role, stops
  -- the migration: the grants below would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Give each new object its decision in its own sql/ file (insert into bitrix_sync.privilege_decisions: runtime, admin, app; array[]::text[] for nothing) and include that file in the migration; delete the decision of an object the migration drops (sql/README.md).';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user, bitrix_sync_app_writer;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user,
    bitrix_sync_app_writer;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user,
    bitrix_sync_app_writer;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user,
    bitrix_sync_app_writer;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and its identity and profile tables keep whatever the App grants its other roles and
  -- everyone (role_privilege_drift leaves them out the same way).
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user, bitrix_sync_app_writer',
                   v_kind, v_row.object_name);
    if v_row.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile') then
      execute format('revoke all on %s %s from public', v_kind, v_row.object_name);
    end if;
  end loop;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;

  -- The App's schema and tables belong to the App's owner: the schema owner grants on them only what
  -- that owner granted it WITH GRANT OPTION (deploy/postgres/bootstrap.sql), and a GRANT of anything
  -- else only warns. A privilege of the catalogue still missing there stops the migration.
  select string_agg(format('%s %s%s on %s', d.role, d.privilege, coalesce(' (' || d.column_name || ')', ''),
                           d.object_name), '; ' order by d.object_name, d.role, d.privilege, d.column_name)
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem = 'missing' and d.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile');
  if v_problems is not null then
    raise exception 'the schema owner may not grant what the catalogue gives on the App''s schema and tables: %', v_problems
      using errcode = 'BS096',
            hint = 'Run deploy/postgres/bootstrap.sql again as the DBA with -v app_owner=<the role that owns han_app''s tables>: it grants the schema owner these privileges WITH GRANT OPTION (docs/deployment.md, "The database roles"). Then migrate again.';
  end if;
end $$;
comment on function bitrix_sync.apply_privileges() is
  'Applies the privilege catalogue (bitrix_sync.role_privileges): BS092 when an object of the project has no decision for a role or a decision names no object; otherwise revokes everything from the four roles and PUBLIC on the project''s objects (in han_app, on those the catalogue names) and grants exactly the catalogue; BS096 when a privilege of the catalogue on the App''s schema or tables is still missing (the schema owner may grant there only what the App''s owner granted it WITH GRANT OPTION). Called by the schema owner at the end of every migration; nobody else may run it.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.apply_privileges()', array[]::text[], array[]::text[], array[]::text[],
   'Run by the schema owner at the end of every migration: applies this catalogue.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
