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
-- status_alerts reads alerts.sla_hours through it; a view's caller needs EXECUTE on its functions.
grant execute on function bitrix_sync._active_setting(text) to bitrix_sync_admin;
grant select on bitrix_sync.status_queue, bitrix_sync.status_workflows, bitrix_sync.status_commands,
  bitrix_sync.status_webhooks, bitrix_sync.status_dead_letters, bitrix_sync.status_alerts,
  bitrix_sync.settings, bitrix_sync.settings_versions, bitrix_sync.state_edges to bitrix_sync_admin;

-- han_app_user: the App writes identity and profile; sync_queue rows appear through the security
-- definer trigger, so it needs no write grant there. It has nothing in schema bitrix_sync.
grant usage on schema han_app to han_app_user;
grant select, insert, update on han_app.user_identity, han_app.client_profile to han_app_user;
grant select on han_app.sync_queue to han_app_user;
revoke all on schema bitrix_sync from han_app_user;
