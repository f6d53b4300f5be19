-- The privilege decisions (sql/privileges/) on the table of snapshots/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.contact_snapshots',
   array['SELECT',
         'INSERT (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, last_webhook_source_at, stale, stale_reason)',
         'UPDATE (user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, last_webhook_source_at, stale, stale_reason)'],
   array[]::text[], array[]::text[], 'Hashes of what the runtime last wrote into or read from each Contact.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
