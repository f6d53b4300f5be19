--! Previous: sha1:ce0bb89e477f57d287325b1367ff51742263de5c
--! Hash: sha1:1fe5d852e23fd510f6abfb200bffa8e06aad6e3f
--! Message: contract

-- Contract (§6.3 step 6): the App no longer stores the Contact link. The expand migration copied
-- every client_profile.bitrix_contact_id into bitrix_sync.entity_external_mapping and verified the
-- copy; this separate migration removes the column and its partial index.
set local lock_timeout = '10s';

-- Dropping an index is a catalog change, quick once the lock is granted; lock_timeout above keeps
-- the wait short. The column drop is the purpose of this migration: no App reader remains (§6.3).
-- squawk-ignore require-concurrent-index-deletion
drop index if exists han_app.client_profile_bitrix_contact_id_idx;
-- squawk-ignore ban-drop-column
alter table han_app.client_profile drop column if exists bitrix_contact_id;
