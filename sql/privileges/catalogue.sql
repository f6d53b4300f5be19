-- The privilege catalogue (§13, DESIGN.md "Roles"; issue 10): for every schema, table, view,
-- sequence and function of the project, what each of the four roles may do, written out, "nothing"
-- included. One row per object in bitrix_sync.privilege_decisions, written by a small upsert that
-- stands in the object's own sql/ file right after its COMMENT ON (tables and sequences, which
-- migrations create: the tables.sql of their folder; the schemas: sql/privileges/schemas.sql).
-- bitrix_sync.apply_privileges() (sql/privileges/apply.sql) applies the catalogue, once, at the end
-- of every migration; docs/security.md is rendered from the view below;
-- test/integration/privileges.test.ts checks that the database's ACLs equal it and that no object of
-- bitrix_sync (or the project's objects of han_app) lacks a decision.
--
-- A privilege is written as GRANT takes it: 'SELECT', 'EXECUTE', 'USAGE', or with columns,
-- 'UPDATE (status, locked_by)'; array[]::text[] is an explicit "nothing". Objects are
-- schema-qualified; a function by its signature as regprocedure prints it (types, no parameter
-- names).
--
-- Who is who: bitrix_sync_user runs the service (the functions it calls and their internal
-- helpers; it writes its tables only in the columns those functions write, so an insert can never
-- name a state and identity or audit columns are out of reach; sql/guards/ holds the same rules for
-- every writer). bitrix_sync_admin is an operator with psql: the audited admin functions (security
-- definer, so no table rights), the status views and the settings it changes. han_app_user is the
-- App: its identity and profile tables; sync_queue rows appear through the security definer trigger.
-- bitrix_sync_app_writer (column app_writer, empty unless written) is the role whose rights the
-- service's one write into an App table runs with (bitrix_sync._write_app_crm_master, security
-- definer, owned by it): the CRM-master columns of client_profile and nothing in bitrix_sync, so
-- whatever the App's owner attaches to its tables runs without the service's rights
-- (docs/security.md, "The App's tables").

create or replace view bitrix_sync.role_privileges as
select d.object_type, d.object_name, r.role, r.privileges, d.note
  from bitrix_sync.privilege_decisions d
  cross join lateral (values ('bitrix_sync_user', d.runtime), ('bitrix_sync_admin', d.admin), ('han_app_user', d.app),
                             ('bitrix_sync_app_writer', d.app_writer))
    as r(role, privileges);
comment on view bitrix_sync.role_privileges is
  'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why, from bitrix_sync.privilege_decisions. bitrix_sync.apply_privileges() applies exactly this; docs/security.md is rendered from it.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
