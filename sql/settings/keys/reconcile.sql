-- The hot settings reconcile.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('reconcile.contacts_interval_sec', 'integer', '900', 60, 86400, null, null, false, 'Incremental Contact reconciliation interval (§10.2: 15 min).'),
  ('reconcile.lease_sec', 'integer', '600', 60, 86400, null, null, false, 'A reconciliation run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('reconcile.opened_filter', 'enum', '"Y"', null, null, '["Y", "N", "1", "0"]', null, false, 'Value sent for the opened filter of crm.item.list; the reference documents Y/N for system booleans.'),
  ('reconcile.overlap_sec', 'integer', '120', 0, 3600, null, null, false, 'Overlap re-read below the watermark.'),
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, null, false, 'Ops alert (§10.2) when the Contacts a run recovered without a webhook exceed this share of the changed linked Contacts it read; this or reconcile.recovered_spike_threshold is enough.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, null, false, 'Ops alert (§10.2) when a run recovers at least this many Contacts without a webhook and more than twice the usual (recovered_baseline); this or reconcile.recovered_spike_ratio is enough.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
