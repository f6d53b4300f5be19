-- What runs on the App's tables besides the project's own (docs/security.md, "The App's tables").
-- The App's owner may attach code to han_app.user_identity and han_app.client_profile: a trigger, a
-- rule, a CHECK or a default (or a generated column, an index expression, a domain's CHECK) calling
-- a function, a row-security policy. The service's writes run such code only as
-- bitrix_sync_app_writer, and every read is made with row_security off, so none of it runs with
-- the service's rights; this lists it all so that an operator knows of each, keeps the App's own in
-- an allow-list (BITRIX_SYNC_APP_TABLE_HOOKS, docs/configuration.md) and sees anything new: preflight
-- names every entry the allow-list lacks (database.app_tables) and readiness reports one
-- (app_tables_changed) within a minute. It also lists what would make a name the service uses mean
-- something else: one of the two tables missing or no longer an ordinary table (a view in its
-- place), a table inheriting from one (an UPDATE reaches it too), and a table of the project in
-- han_app that the project's schema owner no longer owns (the owner of schema han_app may drop it
-- and put its own in its place). Expressions count as calling code when they depend on a function
-- or an operator outside pg_catalog.

create or replace function bitrix_sync.app_table_hooks()
returns table (relation text, kind text, name text, detail text)
language sql stable set search_path = pg_catalog, pg_temp as $$
  with app(relname) as (
    values ('user_identity'::name), ('client_profile'::name)
  ), rel as (
    select a.relname, c.oid, c.relkind, c.relrowsecurity, c.relforcerowsecurity
      from app a
      left join pg_catalog.pg_class c on c.relname = a.relname and c.relnamespace = 'han_app'::pg_catalog.regnamespace
  ), outside(classid, objid) as (
    -- Objects that call a function or operator outside pg_catalog.
    select d.classid, d.objid
      from pg_catalog.pg_depend d
      left join pg_catalog.pg_proc f on d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass and f.oid = d.refobjid
      left join pg_catalog.pg_operator o on d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass and o.oid = d.refobjid
     where coalesce(f.pronamespace, o.oprnamespace) <> 'pg_catalog'::pg_catalog.regnamespace
  ), project as (
    -- The project's own tables in han_app and the owner they must have: schema bitrix_sync's.
    select t.relname, c.oid, c.relowner, c.relkind,
           (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'bitrix_sync') as owner
      from (values ('sync_queue'::name), ('sync_queue_journal'::name)) t(relname)
      left join pg_catalog.pg_class c on c.relname = t.relname and c.relnamespace = 'han_app'::pg_catalog.regnamespace
  )
  select r.relname::text, 'relation', r.relname::text,
         case when r.oid is null then 'missing' else 'relkind ' || r.relkind::text end
    from rel r where r.relkind is distinct from 'r'
  union all
  select r.relname::text, 'row_security', case when r.relforcerowsecurity then 'forced' else 'enabled' end,
         'ALTER TABLE ... ENABLE ROW LEVEL SECURITY'
    from rel r where r.relrowsecurity or r.relforcerowsecurity
  union all
  select r.relname::text, 'policy', p.polname::text, pg_catalog.pg_get_expr(p.polqual, p.polrelid)
    from rel r join pg_catalog.pg_policy p on p.polrelid = r.oid
  union all
  select r.relname::text, 'trigger', t.tgname::text, t.tgfoid::pg_catalog.regprocedure::text
    from rel r join pg_catalog.pg_trigger t on t.tgrelid = r.oid
   where not t.tgisinternal
     and not (t.tgfoid = 'han_app.enqueue_contact_sync()'::pg_catalog.regprocedure
              and t.tgname in ('_500_enqueue_contact_sync_insert', '_500_enqueue_contact_sync_update'))
  union all
  select r.relname::text, 'rule', w.rulename::text, w.ev_type::text
    from rel r join pg_catalog.pg_rewrite w on w.ev_class = r.oid
  union all
  select r.relname::text, case when a.attgenerated = '' then 'default' else 'generated' end, a.attname::text,
         pg_catalog.pg_get_expr(ad.adbin, ad.adrelid)
    from rel r
    join pg_catalog.pg_attrdef ad on ad.adrelid = r.oid
    join pg_catalog.pg_attribute a on a.attrelid = ad.adrelid and a.attnum = ad.adnum
   where exists (select 1 from outside o where o.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass and o.objid = ad.oid)
  union all
  select r.relname::text, 'check', c.conname::text, pg_catalog.pg_get_constraintdef(c.oid)
    from rel r join pg_catalog.pg_constraint c on c.conrelid = r.oid and c.contype = 'c'
   where exists (select 1 from outside o where o.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass and o.objid = c.oid)
  union all
  select r.relname::text, 'index', ic.relname::text, pg_catalog.pg_get_indexdef(i.indexrelid)
    from rel r
    join pg_catalog.pg_index i on i.indrelid = r.oid
    join pg_catalog.pg_class ic on ic.oid = i.indexrelid
   where exists (select 1 from outside o where o.classid = 'pg_catalog.pg_class'::pg_catalog.regclass and o.objid = i.indexrelid)
  union all
  select r.relname::text, 'column_type', a.attname::text, a.atttypid::pg_catalog.regtype::text
    from rel r
    join pg_catalog.pg_attribute a on a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
    join pg_catalog.pg_type ty on ty.oid = a.atttypid
   where ty.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace and ty.typtype <> 'e'
  union all
  select r.relname::text, 'child', i.inhrelid::pg_catalog.regclass::text, 'inherits from it'
    from rel r join pg_catalog.pg_inherits i on i.inhparent = r.oid
  union all
  select p.relname::text, 'owner', p.relname::text,
         case when p.oid is null then 'missing'
              else 'owned by ' || p.relowner::pg_catalog.regrole::text || ', relkind ' || p.relkind::text end
    from project p
   where p.oid is null or p.relowner <> p.owner or p.relkind <> 'r'
  order by 1, 2, 3
$$;
comment on function bitrix_sync.app_table_hooks() is
  'Code the App''s owner attached to han_app.user_identity and han_app.client_profile besides the project''s own (docs/security.md, "The App''s tables"): triggers, rules, row security and its policies, defaults, generated columns, CHECKs and index expressions calling a function or operator outside pg_catalog, columns of a type outside pg_catalog (enums aside), tables inheriting from them, either table missing or not an ordinary table (relation), and a project table in han_app that the project''s schema owner does not own (owner). One row each: the table (without the schema), the kind, the name and a detail. Preflight and readiness compare it with BITRIX_SYNC_APP_TABLE_HOOKS.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.app_table_hooks()', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Preflight and readiness list what runs on the App''s tables; the admin may look too.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
