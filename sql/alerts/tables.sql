-- The privilege decisions (sql/privileges/) on the tables and sequences of alerts/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.business_alerts',
   array['SELECT',
         'INSERT (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, previous_alert_id, correlation_id)',
         'UPDATE (occurrence_count, last_occurred_at, current_contact_id, selected_contact_id, candidate_contact_ids, details, correlation_id, crm_sync_status, item_id, stage_id, status, closed_at)'],
   array[]::text[], array[]::text[], 'Alerts are raised open and finished by the runtime; the admin sees them through status_alerts.'),
  ('sequence', 'bitrix_sync.business_alert_number_seq', array['USAGE'], array[]::text[], array[]::text[],
   'The default of business_alerts.alert_number, evaluated as the inserting role.'),
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
