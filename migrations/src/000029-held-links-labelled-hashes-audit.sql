-- Findings of a security review: the CRM-master fields held back after a link made by phone alone
-- (mapping.hold_after_phone_link), hashes over personal data labelled with their field (v3) and the
-- unkeyed ones cleared or left to the service to re-key, the login behind every audited admin action,
-- the grants drift check widened to role memberships and to roles outside the catalogue.
set local lock_timeout = '10s';

------------------------------------------------------------------------------------------------
-- A link made by phone alone (B1.1, B2.1) trusts the App's phone number. With the hot setting
-- mapping.hold_after_phone_link on, the Contact's CRM-master fields are held back from the App until
-- a robot webhook reports a CRM change made after the link, or an admin confirms
-- (sql/held_links.sql). The hold is the link's: recorded on its mapping row, ended with it.
------------------------------------------------------------------------------------------------
alter table bitrix_sync.entity_external_mapping
  add column if not exists held_at timestamptz,
  add column if not exists held_crm_updated_at timestamptz,
  add column if not exists hold_released_at timestamptz,
  add column if not exists hold_released_by varchar(16);
-- Every existing row has the four columns null: the check holds without a scan worth the name, and
-- the table holds one row per link made (thousands, not millions).
alter table bitrix_sync.entity_external_mapping drop constraint if exists entity_external_mapping_hold;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.entity_external_mapping add constraint entity_external_mapping_hold
  check ((hold_released_at is null) = (hold_released_by is null)
         and (hold_released_at is null or held_at is not null)
         and (held_crm_updated_at is null or held_at is not null)
         and (hold_released_by is null or hold_released_by::text = any ('{robot_webhook,admin}'::text[])));
-- New columns, no row has a value yet: the index builds instantly.
-- squawk-ignore require-concurrent-index-creation
create index if not exists entity_external_mapping_held_idx on bitrix_sync.entity_external_mapping (held_at)
  where status = 'active' and held_at is not null and hold_released_at is null;
comment on column bitrix_sync.entity_external_mapping.held_at is
  'Set when the link was made by phone alone (B1.1, B2.1) while mapping.hold_after_phone_link was on: the Contact''s CRM-master fields are held back from the App until the hold is released. Null: never held.';
comment on column bitrix_sync.entity_external_mapping.held_crm_updated_at is
  'The Contact''s updatedTime at the first read after the link (the service''s own write of the user id included): a robot webhook releases the hold only when its read shows a newer one.';
comment on column bitrix_sync.entity_external_mapping.hold_released_at is
  'When the hold ended: the CRM-master fields were applied from then on. Null while held or never held.';
comment on column bitrix_sync.entity_external_mapping.hold_released_by is
  'robot_webhook (a robot webhook reported a CRM change after the link) | admin (confirm_phone_link; who and why in admin_actions).';

------------------------------------------------------------------------------------------------
-- The database login (session_user) beside every self-declared operator name. Nullable and without
-- a value for existing rows: who ran them was not recorded, and the migration's own login would be
-- a false record. Rows inserted from now on take session_user from the column default (inside a
-- security definer function too: session_user is the login, whatever role the function runs as);
-- the functions that resolve, validate, activate or cancel write it themselves.
------------------------------------------------------------------------------------------------
alter table bitrix_sync.rebind_requests
  add column if not exists requested_db_user varchar(128),
  add column if not exists cancelled_db_user varchar(128);
alter table bitrix_sync.rebind_requests alter column requested_db_user set default session_user;
comment on column bitrix_sync.rebind_requests.requested_db_user is
  'The database login (session_user) that called request_bitrix_contact_rebind(); operator_id is the name it declared. Null for requests recorded before this column existed.';
comment on column bitrix_sync.rebind_requests.cancelled_db_user is
  'The database login (session_user) that called cancel_rebind_request(); cancelled_by is the name it declared.';

alter table bitrix_sync.settings_versions
  add column if not exists created_db_user varchar(128),
  add column if not exists validated_db_user varchar(128),
  add column if not exists activated_db_user varchar(128);
alter table bitrix_sync.settings_versions alter column created_db_user set default session_user;
comment on column bitrix_sync.settings_versions.created_db_user is
  'The database login (session_user) that proposed the version (propose_settings, rollback_settings); created_by is the name it declared. Null for versions recorded before this column existed.';
comment on column bitrix_sync.settings_versions.validated_db_user is
  'The database login (session_user) that validated (or rejected) the version.';
comment on column bitrix_sync.settings_versions.activated_db_user is
  'The database login (session_user) that activated the version; activated_by is the name it declared.';

alter table bitrix_sync.cutover add column if not exists performed_db_user varchar(128);
alter table bitrix_sync.cutover alter column performed_db_user set default session_user;
comment on column bitrix_sync.cutover.performed_db_user is
  'The database login (session_user) that ran perform_cutover(); performed_by is the name it declared. Null for a cutover recorded before this column existed.';

alter table bitrix_sync.technical_dead_letters add column if not exists resolved_db_user varchar(128);
comment on column bitrix_sync.technical_dead_letters.resolved_db_user is
  'The database login (session_user) that acknowledged or requeued the dead letter; resolved_by is the name it declared.';

------------------------------------------------------------------------------------------------
-- Hashes (src/hash.ts, sql/hashes.sql): the service writes "v3:" HMACs labelled with their field and
-- reads v2 and plain SHA-256 as legacy. The unkeyed ones the database holds are cleared here where
-- the next read recomputes them; snapshots' phone hashes are re-keyed by the service (task
-- rekey_hashes).
------------------------------------------------------------------------------------------------
comment on column bitrix_sync.contact_snapshots.name_hash is
  'Keyed hash of NAME as applied: "v3:" HMAC-SHA256 over "name", NUL and the value; "v2:..." (unlabelled) in rows written before 000029, read as legacy; ''cleared'' where an unkeyed hash was cleared (unknown until the next apply). No value copies.';
comment on column bitrix_sync.contact_snapshots.email_hash is
  'Keyed hash of the e-mail as applied: "v3:" HMAC-SHA256 over "email", NUL and the value; "v2:..." (unlabelled) in rows written before 000029, read as legacy; ''cleared'' where an unkeyed hash was cleared. No value copies.';
comment on column bitrix_sync.contact_snapshots.phone_hash is
  'Keyed hash of the phone bitrix-sync last wrote into the Contact (the entry the next change overwrites): "v3:" HMAC-SHA256 over "phone", NUL and the value; older forms (v2, plain SHA-256) are re-keyed by the service.';
comment on column bitrix_sync.workflow_instances.content_hash is
  'Keyed hash of the desired App-master content ("v3:" HMAC-SHA256 over "content", NUL and the JSON; v2 in older rows; null where an unkeyed one was cleared); equal content skips a pass.';

-- #include sql/hashes.sql
select * from bitrix_sync.clear_unkeyed_hashes();

-- #include sql/settings.sql
-- #include sql/held_links.sql
-- #include sql/metrics.sql
-- #include sql/rebind_admin.sql
-- #include sql/dead_letters.sql
-- #include sql/row_guards.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
