-- Run once per database, before the first migration, by a DBA (a superuser, or a role with
-- CREATEROLE that owns the database), with psql, in the database bitrix-sync uses
-- (docs/deployment.md, "The database roles"); and again whenever a release says so (a release that
-- needs a new role, like bitrix_sync_app_writer, fails its migration with BS095 until it has run):
--
--   psql "<DBA's connection to the database>" \
--     -v owner_password_file=/path/to/BITRIX_SYNC_OWNER_PASSWORD \
--     -v user_password_file=/path/to/BITRIX_SYNC_USER_PASSWORD \
--     [-v app_owner=<role that owns han_app's tables, when they exist already> [-v app_owner_membership=grant]] \
--     -f deploy/postgres/bootstrap.sql
--
-- It creates the schema owner `bitrix_sync_owner`: the role the migrations run as
-- (MIGRATION_DATABASE_URL) and so the owner of every schema, table and SECURITY DEFINER function of
-- the project. It is not a superuser: a function running as its owner can do only what that owner
-- may. What it needs, and why:
--   LOGIN, a password         the migrations connect as it;
--   CREATE on the database    the migrations create the schemas bitrix_sync, han_app (when absent),
--                             graphile_worker and graphile_migrate;
--   CREATEROLE                for the first install only: the released migrations create
--                             bitrix_sync_user, bitrix_sync_admin and han_app_user when absent and
--                             (PostgreSQL 15 and older) COMMENT ON ROLE, which needs it even when they
--                             exist. On those versions CREATEROLE can grant any non-superuser role,
--                             pg_execute_server_program included: take it away after migrating
--                             (ALTER ROLE bitrix_sync_owner NOCREATEROLE; preflight warns while it is
--                             there). A role a later release needs comes from this file, run again.
--   bitrix_sync_app_writer    membership in it: the owner creates and replaces the one function that
--                             role owns (bitrix_sync._write_app_crm_master, the service's write into
--                             the App's profile table, which runs with that role's rights only).
-- It also creates bitrix_sync_app_writer (NOLOGIN, NOINHERIT; its privileges come from the
-- migrations) and gives the runtime role LOGIN and its password (when user_password_file is given).
--
-- The App's tables (docs/security.md, "The App's tables"). Where han_app's schema and tables exist
-- already and belong to another role, pass it as `app_owner` (not a superuser). The schema owner
-- then gets, from that role (this part must run as a superuser or a member of app_owner):
--   USAGE (WITH GRANT OPTION) and CREATE on schema han_app: the project's tables live there;
--   SELECT, INSERT, UPDATE (WITH GRANT OPTION) on user_identity and client_profile: the migrations
--     grant them on to the project's roles, as the privilege catalogue says;
--   TRIGGER on both: the migrations install the intent trigger;
-- and no membership in app_owner: with it, the App's owner and the project's would share one set of
-- rights. The released migrations of a first install comment on and alter the App's tables, which
-- only their owner may: for that first `npm run db:migrate`, add `-v app_owner_membership=grant`,
-- then run this file again without it, which takes the membership back (so does every run without
-- it; preflight warns while the membership is there).
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

select 'create role bitrix_sync_app_writer nologin noinherit'
 where not exists (select 1 from pg_catalog.pg_roles where rolname = 'bitrix_sync_app_writer') \gexec
comment on role bitrix_sync_app_writer is 'The rights the service''s one write into an App table runs with (bitrix_sync._write_app_crm_master, which it owns): the CRM-master columns of han_app.client_profile, nothing in bitrix_sync. Never logs in; held by no role but the schema owner (deploy/postgres/bootstrap.sql).';
select 'grant bitrix_sync_app_writer to bitrix_sync_owner'
 where not pg_catalog.pg_has_role('bitrix_sync_owner', 'bitrix_sync_app_writer', 'MEMBER') \gexec

\if :{?app_owner}
  select coalesce((select rolsuper from pg_catalog.pg_roles where rolname = :'app_owner'), false)
         as app_owner_is_superuser \gset
  \if :app_owner_is_superuser
    do $$ begin raise exception 'bootstrap.sql: app_owner is a superuser, and the schema owner must not become one: give han_app''s tables a non-superuser owner first'; end $$;
  \endif
  select pg_catalog.to_regclass('han_app.user_identity') is not null
         and pg_catalog.to_regclass('han_app.client_profile') is not null as app_tables_exist \gset
  \if :app_tables_exist
  \else
    do $$ begin raise exception 'bootstrap.sql: app_owner is for a database whose han_app.user_identity and han_app.client_profile exist already; leave it out otherwise (the migrations create them)'; end $$;
  \endif
  grant usage on schema han_app to bitrix_sync_owner with grant option;
  grant create on schema han_app to bitrix_sync_owner;
  grant select, insert, update on han_app.user_identity, han_app.client_profile to bitrix_sync_owner with grant option;
  grant trigger on han_app.user_identity, han_app.client_profile to bitrix_sync_owner;
  \if :{?app_owner_membership}
    select pg_catalog.format('grant %I to bitrix_sync_owner', :'app_owner')
     where :'app_owner_membership' = 'grant' \gexec
  \else
    select pg_catalog.format('revoke %I from bitrix_sync_owner', :'app_owner')
     where pg_catalog.pg_has_role('bitrix_sync_owner', :'app_owner', 'MEMBER')
       and exists (select 1 from pg_catalog.pg_auth_members m
                    where m.roleid = (select oid from pg_catalog.pg_roles where rolname = :'app_owner')
                      and m.member = (select oid from pg_catalog.pg_roles where rolname = 'bitrix_sync_owner')) \gexec
  \endif
\endif
\unset owner_password
\unset user_password
