-- Least privilege (§13; docs/security.md, "Database roles"): everything is revoked, then exactly what the catalogue
-- bitrix_sync.role_privileges (sql/privileges.sql) lists is granted. Re-runnable; include it (after
-- sql/privileges.sql) in every migration that adds or changes an object of the project.
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

do $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A catalogue row naming no object, or an object of the project without a decision for a role,
  -- stops the migration: the next step would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Add a row per new object to sql/privileges.sql (runtime, admin, app; ''{}'' for nothing) and drop rows of removed objects, then include sql/privileges.sql and sql/grants.sql in the migration.';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and tables keep whatever the App grants its other roles and everyone.
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user', v_kind, v_row.object_name);
  end loop;
  revoke all on han_app.sync_queue from public;
  revoke all on han_app.sync_queue_journal from public;
  revoke all on function han_app.enqueue_contact_sync() from public;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;
end $$;
