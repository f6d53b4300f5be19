-- Run once per database, before the first migration, by a DBA (a superuser, or a role with
-- CREATEROLE that owns the database), with psql, in the database bitrix-sync uses
-- (docs/deployment.md, "The database roles"):
--
--   psql "<DBA's connection to the database>" \
--     -v owner_password_file=/path/to/BITRIX_SYNC_OWNER_PASSWORD \
--     -v user_password_file=/path/to/BITRIX_SYNC_USER_PASSWORD \
--     [-v app_owner=<role that owns han_app's tables, when they exist already>] \
--     -f deploy/postgres/bootstrap.sql
--
-- It creates the schema owner `bitrix_sync_owner`: the role the migrations run as
-- (MIGRATION_DATABASE_URL) and so the owner of every schema, table and SECURITY DEFINER function of
-- the project. It is not a superuser: a function running as its owner can do only what that owner
-- may. What it needs, and why:
--   LOGIN, a password         the migrations connect as it;
--   CREATE on the database    the migrations create the schemas bitrix_sync, han_app (when absent),
--                             graphile_worker and graphile_migrate;
--   CREATEROLE                the migrations create bitrix_sync_user, bitrix_sync_admin and
--                             han_app_user when absent, and (PostgreSQL 15 and older) COMMENT ON
--                             ROLE needs it even when they exist. On those versions CREATEROLE can
--                             grant any non-superuser role, pg_execute_server_program included:
--                             take it away after migrating (ALTER ROLE bitrix_sync_owner
--                             NOCREATEROLE; preflight warns while it is there) and give it back only
--                             for a migration that includes sql/roles.sql.
-- It also gives the runtime role LOGIN and its password (when user_password_file is given) and, on a
-- database where the App's schema exists already, membership in the role that owns it (the
-- migrations add triggers and columns to han_app's tables; `app_owner` must not be a superuser).
--
-- The passwords are read from files by psql itself (backquotes), so they never appear on a command
-- line. Safe to run again: what exists is kept (a password is set only when the role is created).
\set ON_ERROR_STOP on
\if :{?owner_password_file}
\else
  do $$ begin raise exception 'bootstrap.sql: pass -v owner_password_file=<a file holding the owner''s password>'; end $$;
\endif
\set owner_password `cat :'owner_password_file'`

select pg_catalog.format(
         'create role bitrix_sync_owner login nosuperuser nocreatedb createrole noreplication nobypassrls password %L',
         :'owner_password')
 where not exists (select 1 from pg_catalog.pg_roles where rolname = 'bitrix_sync_owner') \gexec
comment on role bitrix_sync_owner is 'bitrix-sync schema owner: the migrations run as it; owns the project''s schemas, tables and security definer functions. Not a superuser (deploy/postgres/bootstrap.sql).';
select pg_catalog.format('grant create on database %I to bitrix_sync_owner', pg_catalog.current_database()) \gexec

\if :{?user_password_file}
  \set user_password `cat :'user_password_file'`
  select pg_catalog.format('create role bitrix_sync_user login password %L', :'user_password')
   where not exists (select 1 from pg_catalog.pg_roles where rolname = 'bitrix_sync_user') \gexec
\endif

\if :{?app_owner}
  select coalesce((select rolsuper from pg_catalog.pg_roles where rolname = :'app_owner'), false)
         as app_owner_is_superuser \gset
  \if :app_owner_is_superuser
    do $$ begin raise exception 'bootstrap.sql: app_owner is a superuser, and the schema owner must not become one: give han_app''s tables a non-superuser owner first'; end $$;
  \endif
  select pg_catalog.format('grant %I to bitrix_sync_owner', :'app_owner') \gexec
\endif
\unset owner_password
\unset user_password
