-- The hot settings contract.* (§12.3): the forms of the portal's REST contract the reference leaves
-- open, which `npm run preflight -- --write` confirms against the configured portal (docs/decisions.md,
-- docs/portal-setup.md). One row per key in the catalogue bitrix_sync.settings, with its type, default,
-- bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('contract.date_filter', 'enum', '"offset"', null, null, '["offset", "no_offset"]', null, false, 'How reconciliation sends its >=updatedTime filter: "offset" (default, the documented form: ISO 8601 with +00:00) or "no_offset" (no offset, 12 hours earlier, for a portal that ignores a value with an offset: the window only widens, by up to 26 hours). npm run preflight -- --write says which the portal honours.'),
  ('contract.registered_filter', 'enum', '"1"', null, null, '["1", "Y"]', null, false, 'How reconciliation and the audit filter on the registration flag: "1" (default, documented for boolean user fields) or "Y". npm run preflight -- --write says which the portal honours.'),
  ('contract.registered_write', 'enum', '"1"', null, null, '["1", "Y"]', null, false, 'How crm.contact.add/update write the registration flag: "1" (1/0, default) or "Y" (Y/N). npm run preflight -- --write says which the portal stores.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
