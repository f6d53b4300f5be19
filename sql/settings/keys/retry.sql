-- The hot settings retry.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('retry.base_ms', 'integer', '1000', 10, 600000, null, null, false, 'Backoff base (full jitter, §9).'),
  ('retry.horizon_sec', 'integer', '86400', 60, 604800, null, null, false, 'Retry horizon from the first attempt (§9: 24 h).'),
  ('retry.max_ms', 'integer', '300000', 100, 86400000, null, null, false, 'Backoff cap.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
