-- The privilege catalogue held against the database (§13): what differs, for preflight, the tests
-- and bitrix_sync.apply_privileges(), which refuses to run while an object lacks a decision.

-- What the database actually grants, in the catalogue's terms, and where the two differ. The
-- project's objects are all of schema bitrix_sync and the objects of han_app the catalogue names
-- (in production han_app holds the App's other tables, which are none of this project's business).
--
-- Beyond the four roles' ACLs it reports what would give someone the project's rights without a
-- grant of this catalogue:
--   * a privilege on a project object held by any other role (the objects' owner aside; the App's
--     schema and its identity and profile tables are the App's to share);
--   * role memberships. The catalogue's rule: each project role may be held by roles outside the
--     project (a login, or a group of logins), each of which holds no other project role, directly
--     or through groups, and none WITH ADMIN OPTION (it could hand the role on); a project role is a
--     member of no role at all (it would gain that role's rights, and a project role inside another
--     one merges the two). So bitrix_sync_app_writer, whose rights serve only the function it owns
--     (docs/security.md, "The App's tables"), is never held by the service's, the admin's or the
--     App's role or by a login holding one of them. The owner of schema bitrix_sync (the migration
--     role, which creates the roles, may administer them and owns that function through its
--     membership in the writer) is exempt; so is, by the same rule, the owner of another database's
--     schema in the same cluster, which holds the writer alone.
create or replace view bitrix_sync.role_privilege_drift as
with recursive objects as (
  select 'schema'::text as object_type, n.nspname::text as object_name, n.nspowner as owner, n.nspacl as acl,
         null::oid as relid, 'n'::"char" as acl_kind
    from pg_namespace n where n.nspname in ('bitrix_sync', 'han_app')
  union all
  select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'view' else 'table' end,
         format('%I.%I', n.nspname, c.relname), c.relowner, c.relacl, c.oid,
         case c.relkind when 'S' then 's'::"char" else 'r'::"char" end
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
  union all
  select 'function', p.oid::regprocedure::text, p.proowner, p.proacl, null, 'f'::"char"
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('bitrix_sync', 'han_app')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
), catalogue as (
  select rp.object_type, rp.object_name, rp.role, rp.privileges from bitrix_sync.role_privileges rp
), project_objects as (
  select o.* from objects o
   where o.object_name = 'bitrix_sync' or o.object_name like 'bitrix\_sync.%'
      or exists (select 1 from catalogue c where c.object_type = o.object_type and c.object_name = o.object_name)
), roles (role) as (
  values ('bitrix_sync_user'), ('bitrix_sync_admin'), ('han_app_user'), ('bitrix_sync_app_writer')
), actual as (
  -- object-wide privileges ...
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC') as role, a.privilege_type as privilege,
         null::text as column_name
    from project_objects o
    cross join lateral aclexplode(coalesce(o.acl, acldefault(o.acl_kind, o.owner))) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
      or (a.grantee <> o.owner and o.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
  union all
  -- ... and column privileges
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname::text
    from project_objects o
    join pg_attribute att on att.attrelid = o.relid and att.attnum > 0 and not att.attisdropped and att.attacl is not null
    cross join lateral aclexplode(att.attacl) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
      or (a.grantee <> o.owner and o.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
), project_role_oids as (
  select r.oid, r.rolname::text as rolname from pg_roles r where r.rolname in (select role from roles)
), schema_owner as (
  select n.nspowner as oid from pg_namespace n where n.nspname = 'bitrix_sync'
), held (holder, project_role) as (
  -- Who holds each project role, directly or through groups.
  select m.member, m.roleid from pg_auth_members m where m.roleid in (select oid from project_role_oids)
  union
  select m.member, h.project_role from held h join pg_auth_members m on m.roleid = h.holder
), membership_drift as (
  -- A project role that is a member of any role, and a project role held WITH ADMIN OPTION.
  select g.rolname::text as granted, mr.rolname::text as member,
         case when m.admin_option then 'MEMBER WITH ADMIN OPTION' else 'MEMBER' end as privilege,
         'extra_membership'::text as problem
    from pg_auth_members m
    join pg_roles g on g.oid = m.roleid
    join pg_roles mr on mr.oid = m.member
   where m.member not in (select oid from schema_owner)
     and (m.member in (select oid from project_role_oids)
          or (m.admin_option and m.roleid in (select oid from project_role_oids)))
  union all
  -- A role outside the project that holds more than one project role.
  select p.rolname, hr.rolname::text, 'MEMBER', 'conflicting_membership'
    from held h
    join project_role_oids p on p.oid = h.project_role
    join pg_roles hr on hr.oid = h.holder
   where h.holder not in (select oid from project_role_oids)
     and h.holder not in (select oid from schema_owner)
     and (select count(distinct h2.project_role) from held h2 where h2.holder = h.holder) > 1
), expected as (
  select c.object_type, c.object_name, c.role, m[1] as privilege, btrim(col) as column_name
    from catalogue c
    cross join lateral unnest(c.privileges) spec
    cross join lateral regexp_match(spec, '^([A-Z]+)\s*(?:\((.*)\))?$') m
    cross join lateral unnest(coalesce(string_to_array(m[2], ','), array[null]::text[])) col
)
select e.object_type, e.object_name, e.role, e.privilege, e.column_name, 'missing'::text as problem
  from expected e
 where exists (select 1 from project_objects o where o.object_type = e.object_type and o.object_name = e.object_name)
   and not exists (select 1 from actual a where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                            and a.column_name is not distinct from e.column_name)
union all
select a.object_type, a.object_name, a.role, a.privilege, a.column_name, 'extra'
  from actual a
 where not exists (select 1 from expected e where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                              and a.column_name is not distinct from e.column_name)
   -- PUBLIC is checked only on what the project owns (it never grants PUBLIC anything); the App's
   -- identity and profile tables and its schema keep whatever the App gives everyone.
   and not (a.role = 'PUBLIC' and a.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
union all
select o.object_type, o.object_name, r.role, null, null, 'undecided'
  from project_objects o cross join roles r
 where not exists (select 1 from catalogue c where (c.object_type, c.object_name, c.role) = (o.object_type, o.object_name, r.role))
union all
select distinct c.object_type, c.object_name, null, null, null, 'unknown_object'
  from catalogue c
 where not exists (select 1 from objects o where o.object_type = c.object_type and o.object_name = c.object_name)
union all
select distinct 'role', d.granted, d.member, d.privilege, null, d.problem
  from membership_drift d;
comment on view bitrix_sync.role_privilege_drift is
  'Differences between the database''s ACLs and bitrix_sync.role_privileges: missing and extra privileges of the four roles and PUBLIC (column privileges by column), extra privileges of any other role on the project''s objects (the owner aside; the App''s schema, identity and profile tables are the App''s), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object), and role memberships outside the catalogue''s rule (object_type role, object_name the role held, role the member): a project role that is a member of a role (bitrix_sync_app_writer included) or held WITH ADMIN OPTION (extra_membership), a role outside the project holding more than one project role, directly or through groups (conflicting_membership). Empty when they agree.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
