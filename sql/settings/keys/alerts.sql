-- The hot settings alerts.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, 2147483647, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.database_only', 'boolean', 'false', null, null, null, null, false, 'true: business alerts stay in the database (bitrix_sync.status_alerts) and no smart-process item is made or changed, so the smart process need not exist. false (default): alerts go to the smart process, whose settings must then be complete, and preflight fails while they cannot.'),
  ('alerts.entity_type_id', 'integer', null, 128, 2147483647, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, '["alert_number", "candidate_contact_ids", "correlation_id", "current_contact_id", "details", "fingerprint", "first_occurred_at", "last_occurred_at", "occurrence_count", "previous_alert_number", "selected_contact_id", "severity", "type", "user_id"]', 64, false, 'Smart-process field names (ufCrm<type>_...) by logical alert field: alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation; one field per entry. All of them (the item fields of §11) while alerts go to the smart process. alert_number is what an unanswered alert.add is looked up by.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, 2147483647, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, null, false, 'Resolution SLA of an alert in calendar hours from its first occurrence (nights, weekends and holidays count); 24 by default.'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, 64, true, 'Terminal stage ID: closed without resolution. Differs from every other stage; required while alerts go to the smart process.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, 64, true, 'Stage ID: in progress (open; optional).'),
  ('alerts.stage_new', 'text', null, null, null, null, 64, true, 'Stage ID for new alerts (open); required while alerts go to the smart process.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, 64, true, 'Terminal stage ID: resolved. Differs from every other stage; required while alerts go to the smart process.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
