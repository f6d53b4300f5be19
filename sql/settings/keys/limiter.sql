-- The hot settings limiter.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('limiter.burst', 'integer', '5', 1, 250, null, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
