-- The compatibility window (§17 rollback, §19; docs/operations.md "The compatibility window",
-- migrations/README.md): which schema this database holds, and the oldest release schema a
-- contract migration still lets run on it. A release's schema is its own newest migration. A release
-- runs on that schema and on every later one, until a contract step (a migration that drops or
-- narrows what earlier releases use) records a floor above it: bitrix_sync.schema_contract_steps,
-- one row per contract migration, written by that migration alone. Every replica reads the floor
-- at start (a release below it refuses to start, exit 76) and in every readiness round
-- (schema_outside_window); preflight and the schema metric read it too.

drop trigger if exists _120_immutable on bitrix_sync.schema_contract_steps;
create trigger _120_immutable before update on bitrix_sync.schema_contract_steps
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'migration', 'oldest_release_schema', 'what', 'recorded_at');
comment on trigger _120_immutable on bitrix_sync.schema_contract_steps is
  'A contract step is history: the migration, its floor and what it contracted never change.';

drop trigger if exists _200_forbid_delete on bitrix_sync.schema_contract_steps;
create trigger _200_forbid_delete before delete on bitrix_sync.schema_contract_steps
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.schema_contract_steps is
  'Contract steps are kept: deleting one would let a release the step excludes start on a schema it cannot use.';

create or replace view bitrix_sync.status_schema as
select split_part(m.filename, '.', 1) as newest_migration, m.date as migrated_at,
       (select count(*) from graphile_migrate.migrations) as migrations_applied,
       s.oldest_release_schema as contract_floor, s.migration as contract_step, s.what as contract_what
  from (select g.filename, g.date from graphile_migrate.migrations g order by g.filename desc limit 1) m
  left join lateral (
    select c.migration, c.oldest_release_schema, c.what
      from bitrix_sync.schema_contract_steps c
     order by c.oldest_release_schema desc, c.migration desc
     limit 1
  ) s on true;
comment on view bitrix_sync.status_schema is
  'The schema this database holds (one row): its newest applied migration (graphile-migrate records the number), when it was applied, how many are applied, and the contract floor: the oldest release schema (a release''s newest migration) that may still run here, with the contract step that set it (null: no migration has contracted, every release from its own schema on runs). Read by readiness, the status document, the schema metric and preflight.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_schema', array['SELECT'], array['SELECT'], array[]::text[],
   'The schema and its contract floor: every replica checks its window at start and in readiness; the admin looks before a rollback.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
