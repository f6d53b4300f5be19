-- The hot settings batch.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
