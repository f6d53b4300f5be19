-- Keyed hashes over personal data (issue 10; src/hash.ts): the service now writes HMAC-SHA256 under
-- the secret BITRIX_SYNC_HASH_KEY ("v2:" + 43 base64url characters) where it wrote plain SHA-256
-- hex. Rows of the old form stay valid and are read as such; nothing here rewrites them (the values
-- they cover are not stored, so only the service can, and it does when it next holds the value).
-- Only the columns' descriptions change.
set local lock_timeout = '10s';

comment on column bitrix_sync.workflow_instances.content_hash is
  'Keyed hash (HMAC-SHA256, "v2:..."; plain SHA-256 hex in rows written before the hash key) of the desired App-master content; equal content skips a pass.';
comment on column bitrix_sync.contact_snapshots.name_hash is
  'Keyed hash (HMAC-SHA256, "v2:..."; plain SHA-256 hex in rows written before the hash key) of NAME as applied; no value copies.';
comment on column bitrix_sync.contact_snapshots.email_hash is
  'Keyed hash (HMAC-SHA256, "v2:..."; plain SHA-256 hex in rows written before the hash key) of the e-mail as applied; no value copies.';
comment on column bitrix_sync.contact_snapshots.phone_hash is
  'Keyed hash (HMAC-SHA256, "v2:..."; plain SHA-256 hex in rows written before the hash key) of the phone bitrix-sync last wrote into the Contact: the entry the next change overwrites.';
