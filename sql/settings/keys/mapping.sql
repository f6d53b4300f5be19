-- The hot settings mapping.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('mapping.hold_after_phone_link', 'boolean', 'false', null, null, null, null, false, 'After a link made by phone alone (B1.1, B2.1), hold the Contact''s name, e-mail and citizenship back from the App until a robot webhook reports a CRM change made after the link or an admin confirms (confirm_phone_link). Off: applied at once, which trusts that the App verifies phone numbers.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
