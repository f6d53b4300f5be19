-- Roles (§13; docs/security.md, "Database roles"): created NOLOGIN if absent; deployment grants LOGIN and passwords.
-- Roles are cluster-wide, so this is safe to run in every database of the cluster.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'bitrix_sync_user') then
    create role bitrix_sync_user nologin;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'bitrix_sync_admin') then
    create role bitrix_sync_admin nologin;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'han_app_user') then
    create role han_app_user nologin;
  end if;
end $$;
comment on role bitrix_sync_user is 'bitrix-sync runtime: the functions it runs with and the columns they write (bitrix_sync.role_privileges); reads settings, rebind requests and the cutover. No DDL, no admin function.';
comment on role bitrix_sync_admin is 'Operators: the cutover, settings, rebind and webhook re-recording functions (security definer) and the status views; reads settings, rebind requests and the cutover.';
comment on role han_app_user is 'The HAN App: writes identity and profile; sync_queue rows appear through the trigger. Nothing in schema bitrix_sync.';
