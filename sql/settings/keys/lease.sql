-- The hot settings lease.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, null, false, 'Lease length for queue rows, workflows, commands and webhooks.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
