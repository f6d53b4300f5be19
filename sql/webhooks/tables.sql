-- The privilege decisions (sql/privileges/) on the tables and sequences of webhooks/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, event_type, entity_type_id, entity_id, source_ip, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes. The runtime also queues a read of a Contact it just linked (open_mapping, event linked).'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),
  ('table', 'bitrix_sync.refused_sources', array[]::text[], array[]::text[], array[]::text[],
   'The journal of addresses the proxy refused (source_ip), written by record_refused_sources (security definer); the admin reads it through status_refused_sources.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
