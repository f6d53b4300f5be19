--! Previous: sha1:40ffb67ff81fe79669cf62a46fd733fedc43a9ac
--! Hash: sha1:480a6bfed6ed082694f4264893f298bcb6f53a8b
--! Message: worker-grants

-- Migration tooling (docs/migrations.md): the runtime role's rights on graphile-worker's and
-- graphile-migrate's own schemas move to sql/worker_grants.sql, which every migration run now also
-- applies afterwards (a graphile-worker upgrade adds tables); sql/grants.sql keeps the project's own
-- schemas.
set local lock_timeout = '10s';

-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md). Everything is revoked from public first; each role gets only
-- what it calls. Re-runnable.

revoke all on schema bitrix_sync from public;
revoke all on all tables in schema bitrix_sync from public;
revoke all on all sequences in schema bitrix_sync from public;
revoke all on all functions in schema bitrix_sync from public;
revoke all on function han_app.enqueue_contact_sync() from public;
revoke all on han_app.sync_queue from public;

-- bitrix_sync_user: the runtime. Writes its own schema's rows (no DDL: the schema is owned by the
-- migration role), processes sync_queue, reads identity/profile, writes CRM-master profile columns.
grant usage on schema bitrix_sync to bitrix_sync_user;
grant select, insert, update on all tables in schema bitrix_sync to bitrix_sync_user;
grant delete on bitrix_sync.webhook_inbox, bitrix_sync.crm_commands to bitrix_sync_user;
grant usage, select on all sequences in schema bitrix_sync to bitrix_sync_user;
grant execute on all functions in schema bitrix_sync to bitrix_sync_user;
grant usage on schema han_app to bitrix_sync_user;
grant select (id, phone_number, record_status, created_at, updated_at) on han_app.user_identity to bitrix_sync_user;
grant select (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)
  on han_app.client_profile to bitrix_sync_user;
grant update (full_name, citizenship, email, source_updated_at) on han_app.client_profile to bitrix_sync_user;
grant select on han_app.sync_queue to bitrix_sync_user;
grant update (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code,
              last_error_at, completed_at, cancel_reason, updated_at)
  on han_app.sync_queue to bitrix_sync_user;
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

-- bitrix_sync_admin: the audited procedures and the status views, nothing else. The procedures are
-- security definer, so no table grant is needed for them.
grant usage on schema bitrix_sync to bitrix_sync_admin;
grant execute on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.propose_settings(jsonb, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.validate_settings_version(integer) to bitrix_sync_admin;
grant execute on function bitrix_sync.activate_settings_version(integer, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.rollback_settings(integer, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.active_settings() to bitrix_sync_admin;
grant select on bitrix_sync.status_queue, bitrix_sync.status_workflows, bitrix_sync.status_commands,
  bitrix_sync.status_webhooks, bitrix_sync.status_dead_letters, bitrix_sync.status_alerts,
  bitrix_sync.settings, bitrix_sync.settings_versions, bitrix_sync.state_edges to bitrix_sync_admin;

-- han_app_user: the App writes identity and profile; sync_queue rows appear through the security
-- definer trigger, so it needs no write grant there. It has nothing in schema bitrix_sync.
grant usage on schema han_app to han_app_user;
grant select, insert, update on han_app.user_identity, han_app.client_profile to han_app_user;
grant select on han_app.sync_queue to han_app_user;
revoke all on schema bitrix_sync from han_app_user;
-- <<< sql/grants.sql
-- >>> sql/worker_grants.sql (included)
-- Rights of the runtime role on graphile-worker's and graphile-migrate's own schemas (§13). These
-- schemas are not the project's: graphile-worker creates and upgrades its tables itself, and an
-- upgrade can add tables the runtime role has no rights on. So this file is applied after every
-- migration run (npm run db:migrate and npm start in library mode; `afterAllMigrations` in .gmrc for
-- the graphile-migrate CLI), not only by the migration that last included it. Re-runnable.

-- graphile-worker's schema, when present (the service migrates it before this file runs).
do $$
begin
  if exists (select 1 from pg_namespace where nspname = 'graphile_worker') then
    grant usage on schema graphile_worker to bitrix_sync_user;
    grant select, insert, update, delete on all tables in schema graphile_worker to bitrix_sync_user;
    grant usage, select on all sequences in schema graphile_worker to bitrix_sync_user;
    grant execute on all functions in schema graphile_worker to bitrix_sync_user;
  end if;
end $$;
-- Readiness compares the applied migrations with the committed ones (§14).
do $$
begin
  if exists (select 1 from pg_namespace where nspname = 'graphile_migrate') then
    grant usage on schema graphile_migrate to bitrix_sync_user;
    grant select on graphile_migrate.migrations to bitrix_sync_user;
  end if;
end $$;
-- graphile-worker enables row-level security on its private tables without policies, which leaves
-- them to their owner. The runtime role is not the owner (the migration role is), so it gets an
-- explicit policy on each: the grants above decide what it may do.
do $$
declare
  v_table text;
begin
  for v_table in
    select c.relname from pg_class c
     where c.relnamespace = to_regnamespace('graphile_worker') and c.relkind = 'r' and c.relrowsecurity
  loop
    if not exists (select 1 from pg_policies p
                    where p.schemaname = 'graphile_worker' and p.tablename = v_table
                      and p.policyname = 'bitrix_sync_user_all') then
      execute format('create policy bitrix_sync_user_all on graphile_worker.%I for all to bitrix_sync_user using (true) with check (true)',
                     v_table);
    end if;
  end loop;
end $$;
-- <<< sql/worker_grants.sql
