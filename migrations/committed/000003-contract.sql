--! Previous: sha1:bd3d09d485b5153ad419f086afcc29f9119687f1
--! Hash: sha1:f79aa82461aafa826eea6691b110354b81a7684e
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
