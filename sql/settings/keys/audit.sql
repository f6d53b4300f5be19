-- The hot settings audit.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('audit.auto_repair_kinds', 'json', '{}', null, null, '["contact_missing", "crm_master_behind", "inactive_user_linked", "phone_missing", "registered_inactive_user", "registered_unknown_user", "registered_wrong", "unmapped_user", "user_id_wrong"]', 3, false, 'Drift kinds the convergence audit repairs by itself after each run ("on"), as repair_drift would; every other kind waits for an admin. Empty (the default): no automatic repair.'),
  ('audit.budget_share', 'number', '0.05', 0.001, 0.5, null, null, false, 'Share of limiter.refill_per_sec the convergence audit may use, and only spare budget: a token of a full bucket, whose refill sync traffic is not using.'),
  ('audit.enabled', 'boolean', 'true', null, null, null, null, false, 'Whether the crontab''s convergence audit runs; a queued {"all": true} run goes ahead regardless.'),
  ('audit.grace_sec', 'integer', '1800', 0, 86400, null, null, false, 'A Contact changed more recently than this is not judged on its CRM-master fields: a webhook or the next reconciliation may still bring it (§10.2).'),
  ('audit.interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'A sampled convergence audit run is due this long after the last one started.'),
  ('audit.lease_sec', 'integer', '900', 60, 86400, null, null, false, 'An audit run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('audit.period_days', 'integer', '7', 1, 90, null, null, false, 'Every active link is compared with its Contact at least once in this many days; each run samples the least recently audited.'),
  ('audit.run_budget_sec', 'integer', '300', 10, 3600, null, null, false, 'An audit run stops sending requests after this long; the next run goes on where it stopped.'),
  ('audit.users_per_run', 'integer', '10000', 1, 10000000, null, null, false, 'A sampled run judges the user kinds (unmapped_user, inactive_user_linked) over at least this many App users, in id order from where the last run stopped, and more when audit.period_days needs more (twice its share of the users); a full run judges every user.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
