-- The compatibility window (§17 rollback, §19; issue 32): which schemas a release runs on, stated in
-- the database so that every replica can check it (docs/operations.md, "The compatibility window";
-- migrations/README.md).
--
-- A release's schema is its own newest migration; it runs on that schema and on every later one
-- that only expanded it. A migration that contracts (drops or narrows what an earlier release
-- uses) is a contract step: it records itself in bitrix_sync.schema_contract_steps with the oldest
-- release schema that still runs on what it leaves (the contract floor), in its own source:
--
--   insert into bitrix_sync.schema_contract_steps (migration, oldest_release_schema, what)
--   values ('000045', '000043', 'drops column bitrix_sync.x.y, unused since 000043');
--
-- A release whose newest migration is below the highest floor refuses to start (exit 76) and, while
-- it runs, answers not ready with schema_outside_window. bitrix_sync.status_schema shows the schema
-- and its floor (sql/compatibility/window.sql). No migration from 000036 on has contracted: the
-- table starts empty, and the release before this one (000035) stays inside the window.
--
-- And a user's intents in the order the App recorded them last (found by drill:rollback): a pause
-- (or any backlog) let a deactivation and a later reactivation of one user wait together, the
-- reactivation coalesced into the user's older map_or_create row and kept that row's place, and the
-- intake applied the deactivation last. fold_intent_journal (sql/intake/fold.sql) now places every
-- queue row at its newest intent (next_attempt_at; created_at still says since when), and
-- claim_sync_tasks (sql/queue/lease.sql) returns its rows in that order, which the intake follows,
-- and takes no intent of a user while another intake holds one of that user's (two replicas taking
-- a user's deactivation and reactivation at once left the user deactivated).
--
-- Expand only: a new empty table, two triggers on it, a view; two function bodies replaced with
-- their signatures and results unchanged.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table if not exists bitrix_sync.schema_contract_steps (
  migration text primary key check (migration ~ '^[0-9]{6}$'),
  oldest_release_schema text not null check (oldest_release_schema ~ '^[0-9]{6}$'),
  what text not null check (length(btrim(what)) between 3 and 500),
  recorded_at timestamptz not null default now(),
  constraint schema_contract_steps_floor_not_after check (oldest_release_schema <= migration)
);
comment on table bitrix_sync.schema_contract_steps is
  'Contract steps (§17): one row per migration that dropped or narrowed what earlier releases use, written by that migration. The highest oldest_release_schema is the contract floor: a release whose newest migration is below it cannot run on this schema. Never updated or deleted.';
comment on column bitrix_sync.schema_contract_steps.migration is 'The contract migration''s number (000045).';
comment on column bitrix_sync.schema_contract_steps.oldest_release_schema is
  'The oldest release schema (a release''s newest migration number) that still runs on what this migration leaves: the first release that no longer used what it drops.';
comment on column bitrix_sync.schema_contract_steps.what is 'What the migration dropped or narrowed, in a sentence (no personal data).';
comment on column bitrix_sync.schema_contract_steps.recorded_at is 'When the migration was applied.';

-- #include sql/compatibility/window.sql
-- #include sql/compatibility/tables.sql
-- #include sql/intake/fold.sql
-- #include sql/queue/lease.sql
select bitrix_sync.apply_privileges();
