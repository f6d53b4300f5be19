-- The privilege catalogue as rows that stand beside their objects (sql/privileges/, sql/README.md).
-- Until now bitrix_sync.role_privileges was a view over one VALUES list of every decision, and
-- sql/grants.sql revoked and granted the whole list: a migration that added one function
-- re-included both files whole (540 lines). Now each decision is a row of
-- bitrix_sync.privilege_decisions, written by a small upsert in the object's own sql/ file, and
-- bitrix_sync.apply_privileges() applies the catalogue: a migration carries the files it changes
-- and ends with one line.
--
-- 1. The table, filled once from the view as it stands: these are the decisions sql/ holds (npm run
--    db:check compares them row by row). The view's one doubled decision, _trace_context(text) with
--    two notes, becomes one row, with the longer note.
-- 2. role_privileges reads the table, with the same columns; role_privilege_drift, which reads the
--    view, is unchanged.
-- 3. apply_privileges() does what sql/grants.sql did (BS092 for an object without a decision), and
--    runs at the end of this migration: the grants it gives are the ones the database holds.
--
-- Locks and time: a new table of 240 rows, a view replaced, a function created, the grants
-- given again (brief locks on the catalogue's rows of each object). Nothing touches the App's tables'
-- rows or the sync path.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table if not exists bitrix_sync.privilege_decisions (
  object_type text not null check (object_type in ('schema', 'table', 'view', 'sequence', 'function')),
  object_name text not null check (object_name <> ''),
  runtime text[] not null,
  admin text[] not null,
  app text[] not null,
  note text not null check (length(btrim(note)) > 0),
  primary key (object_type, object_name)
);
comment on table bitrix_sync.privilege_decisions is
  'The privilege catalogue (§13), one row per object of the project: what each of the three roles may do on it, and why. Written by the upsert in the object''s own sql/ file; read through bitrix_sync.role_privileges; applied by bitrix_sync.apply_privileges().';
comment on column bitrix_sync.privilege_decisions.object_type is 'schema | table | view | sequence | function.';
comment on column bitrix_sync.privilege_decisions.object_name is
  'Schema-qualified name; a function by its signature as regprocedure prints it (types, no parameter names).';
comment on column bitrix_sync.privilege_decisions.runtime is
  'What bitrix_sync_user may do, as GRANT takes it (''EXECUTE'', ''SELECT'', ''UPDATE (status, locked_by)''); empty: explicitly nothing.';
comment on column bitrix_sync.privilege_decisions.admin is 'What bitrix_sync_admin may do, the same way.';
comment on column bitrix_sync.privilege_decisions.app is 'What han_app_user may do, the same way.';
comment on column bitrix_sync.privilege_decisions.note is 'Why: docs/security.md prints it beside the grants.';

insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note)
select distinct on (rp.object_type, rp.object_name)
       rp.object_type, rp.object_name,
       max(rp.privileges) filter (where rp.role = 'bitrix_sync_user'),
       max(rp.privileges) filter (where rp.role = 'bitrix_sync_admin'),
       max(rp.privileges) filter (where rp.role = 'han_app_user'),
       rp.note
  from bitrix_sync.role_privileges rp
 group by rp.object_type, rp.object_name, rp.note
 order by rp.object_type, rp.object_name, length(rp.note) desc
on conflict (object_type, object_name) do nothing;

-- #include sql/privileges/catalogue.sql
-- #include sql/privileges/apply.sql
-- #include sql/privileges/tables.sql

select bitrix_sync.apply_privileges();
