-- The App's side as an adversary (docs/security.md, "The App's tables"). The App is a system of its
-- own whose login usually owns han_app.user_identity and han_app.client_profile, and an owner can
-- attach code to its tables. This migration keeps that code from running with the service's rights:
--
-- 1. bitrix_sync_app_writer: a role with the CRM-master columns of client_profile and nothing in
--    bitrix_sync. The service's one write into an App table runs as it, in a security definer
--    function it owns (_write_app_crm_master), where no code can SET ROLE back. The role is made by
--    deploy/postgres/bootstrap.sql; a schema owner that may not create it (no CREATEROLE, as after
--    bootstrap) gets BS095 and the hint to run bootstrap.sql again. privilege_decisions gains its
--    column (app_writer; empty, explicitly nothing, for every existing decision).
-- 2. The security definer functions that read the App's tables run with row_security off, and the
--    view status_drift reads them through one: a policy on an App table is an error, never code run
--    as the owner or the admin. The service's connections set the same (src/db/search-path.ts).
-- 3. app_table_hooks(): what runs on the App's tables besides the project's own, for preflight and
--    readiness.
-- 4. The hold of a link made by phone alone ends only when the Contact's CRM-master values change
--    (held_values_hash), which the service's own writes never do; the previous release's form of
--    held_link_read keeps holds and releases none.
-- 5. diagnose_app_values compares in the database instead of handing out a digest salted by the
--    caller: the (uuid, text) form goes, with its decision.
-- 6. acquire_spare_crm_request takes the limiter's numbers from the settings and the server; the
--    previous release's form ignores the ones it passes. spare_budget_use counts every grant per
--    day, login and holder.
-- 7. _repair_drift wakes a sleeping sync loop through the intake watch (the advisory key it used
--    was retired by migration 000028).
-- 8. The owner of schema han_app may drop the project's tables there and put its own in their place:
--    every function that writes han_app.sync_queue or its journal first checks they are still the
--    project's (_check_queue_tables, BS097). The App's intent trigger function is replaced alone:
--    the triggers' DDL moved to sql/intake/app_trigger_install.sql (CREATE OR REPLACE TRIGGER, which
--    needs only the TRIGGER privilege) and is not applied here.
--
-- Expand only: every function the previous release calls keeps its signature (apply_crm_master_fields,
-- held_link_read(uuid, timestamptz, boolean), acquire_spare_crm_request with eight arguments,
-- auto_repair_drift); the runtime keeps its UPDATE on client_profile, which that release's readiness
-- checks. Locks: new columns without defaults that need a rewrite, a new table, a CHECK on an empty
-- column validated at once, functions and views replaced. The App's tables are not touched.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

do $$
declare
  v_can boolean := (select r.rolsuper or r.rolcreaterole from pg_catalog.pg_roles r where r.rolname = current_user);
begin
  if not exists (select 1 from pg_catalog.pg_roles where rolname = 'bitrix_sync_app_writer') then
    if not v_can then
      raise exception 'role bitrix_sync_app_writer does not exist, and % may not create it', current_user
        using errcode = 'BS095',
              hint = 'Run deploy/postgres/bootstrap.sql again as the DBA (docs/deployment.md, "The database roles"): it creates the role and makes the schema owner its member. Then migrate again.';
    end if;
    begin
      create role bitrix_sync_app_writer nologin noinherit;
    exception when duplicate_object or unique_violation then
      -- Another database of the cluster migrating at the same time made it first.
      null;
    end;
    comment on role bitrix_sync_app_writer is 'The rights the service''s one write into an App table runs with (bitrix_sync._write_app_crm_master, which it owns): the CRM-master columns of han_app.client_profile, nothing in bitrix_sync. Never logs in; held by no role but the schema owner (deploy/postgres/bootstrap.sql).';
  end if;
  -- The schema owner owns and replaces the writer's function: it must be the writer's member.
  if not pg_catalog.pg_has_role(current_user, 'bitrix_sync_app_writer', 'MEMBER') then
    if not v_can then
      raise exception '% is not a member of bitrix_sync_app_writer and may not make itself one', current_user
        using errcode = 'BS095',
              hint = 'Run deploy/postgres/bootstrap.sql again as the DBA (docs/deployment.md, "The database roles"): it grants the role to the schema owner. Then migrate again.';
    end if;
    execute pg_catalog.format('grant bitrix_sync_app_writer to %I', current_user);
  end if;
end $$;

alter table bitrix_sync.privilege_decisions add column if not exists app_writer text[] not null default '{}';
comment on column bitrix_sync.privilege_decisions.app_writer is
  'What bitrix_sync_app_writer may do, the same way; empty for everything but the App''s schema and client_profile.';

alter table bitrix_sync.entity_external_mapping add column if not exists held_values_hash varchar(64);
comment on column bitrix_sync.entity_external_mapping.held_values_hash is
  'The keyed hash of the Contact''s CRM-master values (name, e-mail, citizenship) at the first read after a held link, with the hash key''s id (src/hash.ts heldValuesHash): a robot webhook releases the hold only when its read gives another one. Null while no read with values was seen.';
-- No row has a value yet: the check validates at once.
alter table bitrix_sync.entity_external_mapping drop constraint if exists entity_external_mapping_held_values;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.entity_external_mapping add constraint entity_external_mapping_held_values
  check (held_values_hash is null
         or (held_at is not null and held_values_hash::text ~ '^[A-Za-z0-9_-]{8}:v3:[A-Za-z0-9_-]{43}$'));

create table if not exists bitrix_sync.spare_budget_use (
  day date not null,
  db_user varchar(128) not null,
  holder varchar(200) not null,
  bucket varchar(200) not null,
  grants bigint not null check (grants > 0),
  first_at timestamptz not null,
  last_at timestamptz not null check (last_at >= first_at),
  primary key (day, db_user, holder, bucket)
);
comment on table bitrix_sync.spare_budget_use is
  'Who took the spare budget of the CRM limiter, and when: one row per day, database login (session_user), holder (the caller''s own label) and bucket, with the number of slots granted and the first and last grant. Written by acquire_spare_crm_request (security definer); one row a day per process and login, kept.';
comment on column bitrix_sync.spare_budget_use.db_user is 'The database login that called acquire_spare_crm_request.';
comment on column bitrix_sync.spare_budget_use.holder is 'The holder the caller named (e.g. host:pid:audit, diagnose:host:pid).';

drop function if exists bitrix_sync.diagnose_app_values(uuid, text);
delete from bitrix_sync.privilege_decisions
 where object_type = 'function' and object_name = 'bitrix_sync.diagnose_app_values(uuid,text)';

-- #include sql/common/queue_tables.sql
-- #include sql/privileges/catalogue.sql
-- #include sql/privileges/drift.sql
-- #include sql/privileges/apply.sql
-- #include sql/privileges/schemas.sql
-- #include sql/limiter/spare.sql
-- #include sql/limiter/tables.sql
-- #include sql/intake/app_trigger.sql
-- #include sql/intake/fold.sql
-- #include sql/intake/tables.sql
-- #include sql/cutover/cutover.sql
-- #include sql/queue/lease.sql
-- #include sql/queue/outcomes.sql
-- #include sql/mapping/held.sql
-- #include sql/mapping/tables.sql
-- #include sql/snapshots/snapshots.sql
-- #include sql/admin/explain_user.sql
-- #include sql/admin/diagnose.sql
-- #include sql/rebind/request.sql
-- #include sql/dead_letters/requeue_rules.sql
-- #include sql/retention/batch.sql
-- #include sql/audit/run.sql
-- #include sql/audit/findings.sql
-- #include sql/audit/user_drift.sql
-- #include sql/audit/repair.sql
-- #include sql/audit/status.sql
-- #include sql/status/app_tables.sql
-- #include sql/metrics/snapshot.sql
select bitrix_sync.apply_privileges();
