-- The hot settings retention.* (§12.3): one row per key in the catalogue bitrix_sync.settings, with its
-- type, default, bounds and description (sql/settings/validate.sql checks values against them).

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('retention.batch_size', 'integer', '500', 10, 5000, null, null, false, 'Rows deleted per retention transaction; each batch is its own short transaction.'),
  ('retention.commands_days', 'integer', '30', 1, 3650, null, null, false, 'Finished CRM commands (succeeded, dead-lettered) are deleted this many days after they finished; at most retention.workflows_days.'),
  ('retention.enabled', 'boolean', 'true', null, null, null, null, false, 'Whether the hourly retention task deletes finished rows.'),
  ('retention.queue_days', 'integer', '30', 1, 3650, null, null, false, 'Finished han_app.sync_queue rows (processed, cancelled, dead-lettered) are deleted this many days after they finished.'),
  ('retention.run_budget_sec', 'integer', '60', 1, 3000, null, null, false, 'A retention run stops starting new batches after this long; the next run goes on.'),
  ('retention.webhooks_days', 'integer', '7', 1, 3650, null, null, false, 'Processed (and coalesced) webhook inbox rows are deleted this many days after they were processed.'),
  ('retention.workflows_days', 'integer', '90', 1, 3650, null, null, false, 'Finished workflows are deleted this many days after they finished, once their commands are gone.')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;
