--! Previous: sha1:1851a116b6e46c434741602c6b16f7d177ebf11f
--! Hash: sha1:90f2274196fac31d330d577087caeb140081a8b1
--! Message: operator-loop

-- The operator's loop (issue 11): technical dead letters an admin can acknowledge or requeue,
-- alert mirroring that retries and looks an unanswered add up before adding again, retention of
-- finished rows, readiness on sub-command permission errors, and status views that read only live
-- rows through partial indexes however long the history is.
set local lock_timeout = '10s';

------------------------------------------------------------------------------------------------
-- Dead letters: how each one was resolved, by whom and why (sql/dead_letters.sql).
------------------------------------------------------------------------------------------------
alter table bitrix_sync.technical_dead_letters
  add column if not exists resolution varchar(16),
  add column if not exists resolution_reason text,
  add column if not exists requeued_to varchar(80);
-- Nothing resolved a dead letter before this migration, so every row passes; the table holds
-- failures only (hundreds of rows, not millions) and the check validates in this transaction.
alter table bitrix_sync.technical_dead_letters drop constraint if exists technical_dead_letters_resolution_check;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.technical_dead_letters add constraint technical_dead_letters_resolution_check
  check ((resolution is null and resolved_at is null and resolved_by is null and resolution_reason is null
          and requeued_to is null)
         or (resolution in ('acknowledged', 'requeued') and resolved_at is not null and resolved_by is not null
             and length(btrim(resolution_reason)) between 3 and 500
             and (resolution = 'requeued') = (requeued_to is not null)));
comment on column bitrix_sync.technical_dead_letters.resolved_at is 'When an admin acknowledged or requeued it; null while open.';
comment on column bitrix_sync.technical_dead_letters.resolved_by is 'Operator identifier given to acknowledge_dead_letter() or requeue_dead_letter().';
comment on column bitrix_sync.technical_dead_letters.resolution is 'acknowledged (looked at, nothing re-sent) | requeued (a new attempt was started).';
comment on column bitrix_sync.technical_dead_letters.resolution_reason is 'The operator''s reason, written by an admin (3 to 500 characters).';
comment on column bitrix_sync.technical_dead_letters.requeued_to is 'What carries the new attempt: sync_queue:<id>, webhook:<id>, workflow:<id> or alert:<id>.';

-- The admin audit names the dead letter an acknowledge or requeue resolved. No foreign key: like
-- workflow_id, it is a reference for reading, and dead letters are never deleted.
alter table bitrix_sync.admin_actions add column if not exists dead_letter_id bigint;
comment on column bitrix_sync.admin_actions.dead_letter_id is
  'The technical dead letter an acknowledge_dead_letter or requeue_dead_letter resolved.';
comment on column bitrix_sync.admin_actions.action is
  'resume_workflow, cancel_workflow, cancel_rebind_request, acknowledge_dead_letter, requeue_dead_letter, ...';

------------------------------------------------------------------------------------------------
-- A requeued workflow starts over with a retry horizon of its own (sql/workflows.sql).
------------------------------------------------------------------------------------------------
alter table bitrix_sync.workflow_instances add column if not exists requeued_at timestamptz;
comment on column bitrix_sync.workflow_instances.requeued_at is
  'When an admin last requeued the failed workflow (requeue_dead_letter); its retry horizon counts from here instead of created_at.';

------------------------------------------------------------------------------------------------
-- Live rows through partial indexes: the status views, the metrics and the sync loop read only
-- unfinished rows, retention finds finished ones by age, and deleting a row finds what refers to it
-- without a scan. These tables are written by the service, not by the App; each index is built in
-- this transaction under the lock_timeout above.
------------------------------------------------------------------------------------------------
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_commands_live_idx on bitrix_sync.crm_commands (command_type, status)
  where status <> 'succeeded';
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_commands_alert_idx on bitrix_sync.crm_commands (alert_id, id)
  where alert_id is not null;
-- squawk-ignore require-concurrent-index-creation
create index if not exists crm_commands_completed_idx on bitrix_sync.crm_commands (completed_at)
  where completed_at is not null;
comment on index bitrix_sync.crm_commands_live_idx is 'status_commands and the pump read unfinished and dead-lettered commands only.';
comment on index bitrix_sync.crm_commands_alert_idx is 'The commands of one business alert (mirroring, lookups, requeue).';
comment on index bitrix_sync.crm_commands_completed_idx is 'Retention: finished commands by age.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_live_idx on bitrix_sync.webhook_inbox (receiver, status)
  where status <> 'processed';
-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_coalesced_into_idx on bitrix_sync.webhook_inbox (coalesced_into)
  where coalesced_into is not null;
-- squawk-ignore require-concurrent-index-creation
create index if not exists webhook_inbox_processed_idx on bitrix_sync.webhook_inbox (processed_at)
  where status = 'processed';
comment on index bitrix_sync.webhook_inbox_live_idx is 'status_webhooks reads unprocessed rows only.';
comment on index bitrix_sync.webhook_inbox_coalesced_into_idx is 'The events coalesced into one (complete_webhook, and the foreign key check when retention deletes).';
comment on index bitrix_sync.webhook_inbox_processed_idx is 'Retention: processed events by age.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists workflow_instances_finished_idx on bitrix_sync.workflow_instances (finished_at)
  where state in ('succeeded', 'failed', 'cancelled');
comment on index bitrix_sync.workflow_instances_finished_idx is 'Retention: finished workflows by age.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists business_alerts_unmirrored_idx on bitrix_sync.business_alerts (id)
  where crm_sync_status <> 'synced';
comment on index bitrix_sync.business_alerts_unmirrored_idx is 'Alerts whose smart-process item is behind (mirroring, status_alert_mirror); alerts are never deleted.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists entity_external_mapping_workflow_idx on bitrix_sync.entity_external_mapping (workflow_id)
  where workflow_id is not null;
-- squawk-ignore require-concurrent-index-creation
create index if not exists rebind_requests_workflow_idx on bitrix_sync.rebind_requests (workflow_id)
  where workflow_id is not null;
comment on index bitrix_sync.entity_external_mapping_workflow_idx is 'Retention keeps the workflows that opened or closed a mapping (its audit).';
comment on index bitrix_sync.rebind_requests_workflow_idx is 'Retention keeps the workflows of rebind requests (their audit, and the foreign key).';

-- >>> sql/settings.sql (included)
-- Hot settings (§12.3): a typed catalogue, versions with validation status and audit, activation of
-- validated versions only, rollback, and a NOTIFY so workers reload.

-- Every key has bounds (the table's CHECK settings_bounded): integers and numbers a range (integers
-- within int4, so every consumer reads them as int4), text a maximum length, enums their values, the
-- json object its allowed entries and the maximum length of each value.
insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, 2147483647, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.entity_type_id', 'integer', null, 128, 2147483647, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, '["alert_number", "candidate_contact_ids", "correlation_id", "current_contact_id", "details", "fingerprint", "first_occurred_at", "last_occurred_at", "occurrence_count", "previous_alert_number", "selected_contact_id", "severity", "type", "user_id"]', 64, false, 'Smart-process field names (ufCrm<type>_...) by logical alert field: alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation. alert_number (or fingerprint) is what an unanswered alert.add is looked up by.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, 2147483647, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, null, false, 'Resolution SLA of an alert in calendar hours from its first occurrence (nights, weekends and holidays count); 24 by default.'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, 64, true, 'Terminal stage ID: closed without resolution.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, 64, true, 'Stage ID: in progress.'),
  ('alerts.stage_new', 'text', null, null, null, null, 64, true, 'Stage ID for new alerts.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, 64, true, 'Terminal stage ID: resolved.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, null, false, 'Rows claimed from a queue per round trip.'),
  ('health.crm_stale_sec', 'integer', '300', 30, 86400, null, null, false, 'Readiness says degraded (crm_stale) when the CRM has had no success for this long while failures arrive (§14).'),
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, null, false, 'Lease length for queue rows, workflows, commands and webhooks.'),
  ('limiter.burst', 'integer', '5', 1, 250, null, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).'),
  ('reconcile.contacts_interval_sec', 'integer', '900', 60, 86400, null, null, false, 'Incremental Contact reconciliation interval (§10.2: 15 min).'),
  ('reconcile.lease_sec', 'integer', '600', 60, 86400, null, null, false, 'A reconciliation run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('reconcile.opened_filter', 'enum', '"Y"', null, null, '["Y", "N", "1", "0"]', null, false, 'Value sent for the opened filter of crm.item.list; the reference documents Y/N for system booleans.'),
  ('reconcile.overlap_sec', 'integer', '120', 0, 3600, null, null, false, 'Overlap re-read below the watermark.'),
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, null, false, 'Ops alert when recovered-without-webhook / changed exceeds this share.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, null, false, 'Ops alert when a run recovers at least this many Contacts without a webhook and more than twice the baseline.'),
  ('retention.batch_size', 'integer', '500', 10, 5000, null, null, false, 'Rows deleted per retention transaction; each batch is its own short transaction.'),
  ('retention.commands_days', 'integer', '30', 1, 3650, null, null, false, 'Finished CRM commands (succeeded, dead-lettered) are deleted this many days after they finished; at most retention.workflows_days.'),
  ('retention.enabled', 'boolean', 'true', null, null, null, null, false, 'Whether the hourly retention task deletes finished rows.'),
  ('retention.queue_days', 'integer', '30', 1, 3650, null, null, false, 'Finished han_app.sync_queue rows (processed, cancelled, dead-lettered) are deleted this many days after they finished.'),
  ('retention.run_budget_sec', 'integer', '60', 1, 3000, null, null, false, 'A retention run stops starting new batches after this long; the next run goes on.'),
  ('retention.webhooks_days', 'integer', '7', 1, 3650, null, null, false, 'Processed (and coalesced) webhook inbox rows are deleted this many days after they were processed.'),
  ('retention.workflows_days', 'integer', '90', 1, 3650, null, null, false, 'Finished workflows are deleted this many days after they finished, once their commands are gone.'),
  ('retry.base_ms', 'integer', '1000', 10, 600000, null, null, false, 'Backoff base (full jitter, §9).'),
  ('retry.horizon_sec', 'integer', '86400', 60, 604800, null, null, false, 'Retry horizon from the first attempt (§9: 24 h).'),
  ('retry.max_ms', 'integer', '300000', 100, 86400000, null, null, false, 'Backoff cap.'),
  ('worker.poll_interval_ms', 'integer', '2000', 100, 5000, null, null, false, 'Fallback poll when no NOTIFY arrives (§8: at most 5 s).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;

create or replace function bitrix_sync._settings_errors(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_def bitrix_sync.settings;
  v_val jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_key text;
  v_num numeric;
  v_entry record;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return '["values must be a JSON object"]'::jsonb;
  end if;
  for v_key in select k from jsonb_object_keys(p_values) k where k not in (select s.key from bitrix_sync.settings s) loop
    v_errors := v_errors || to_jsonb(format('%s: unknown setting', v_key));
  end loop;
  for v_def in select * from bitrix_sync.settings order by key loop
    v_val := coalesce(p_values -> v_def.key, v_def.default_value, 'null'::jsonb);
    if jsonb_typeof(v_val) = 'null' then
      if not v_def.nullable then
        v_errors := v_errors || to_jsonb(format('%s: a value is required', v_def.key));
      end if;
      continue;
    end if;
    case v_def.value_type
      when 'integer', 'number' then
        if jsonb_typeof(v_val) <> 'number' then
          v_errors := v_errors || to_jsonb(format('%s: must be a number', v_def.key));
          continue;
        end if;
        v_num := (v_val #>> '{}')::numeric;
        -- 1036.0 and 1.0360e3 are whole numbers: stored as 1036 (_normalise_settings).
        if v_def.value_type = 'integer' and v_num <> trunc(v_num) then
          v_errors := v_errors || to_jsonb(format('%s: must be a whole number', v_def.key));
        end if;
        -- Every number has both bounds (CHECK settings_bounded); an integer's lie within int4.
        if v_num < v_def.min_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at least %s', v_def.key, v_def.min_value));
        end if;
        if v_num > v_def.max_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s', v_def.key, v_def.max_value));
        end if;
      when 'text' then
        if jsonb_typeof(v_val) <> 'string' or length(v_val #>> '{}') = 0 then
          v_errors := v_errors || to_jsonb(format('%s: must be a non-empty string', v_def.key));
        elsif length(v_val #>> '{}') > v_def.max_length then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s characters', v_def.key, v_def.max_length));
        end if;
      when 'boolean' then
        if jsonb_typeof(v_val) <> 'boolean' then
          v_errors := v_errors || to_jsonb(format('%s: must be true or false', v_def.key));
        end if;
      when 'enum' then
        if not (v_def.allowed_values @> jsonb_build_array(v_val)) then
          v_errors := v_errors || to_jsonb(format('%s: must be one of %s', v_def.key, v_def.allowed_values));
        end if;
      when 'json' then
        if jsonb_typeof(v_val) <> 'object' then
          v_errors := v_errors || to_jsonb(format('%s: must be a JSON object', v_def.key));
          continue;
        end if;
        -- An object of allowed entries, each a non-empty string of at most max_length characters.
        for v_entry in select e.key, e.value from jsonb_each(v_val) e order by e.key loop
          if not (v_def.allowed_values @> jsonb_build_array(v_entry.key)) then
            v_errors := v_errors || to_jsonb(format('%s: unknown entry %s (allowed: %s)', v_def.key,
                                                    left(v_entry.key, 64), v_def.allowed_values));
          elsif jsonb_typeof(v_entry.value) <> 'string' or length(v_entry.value #>> '{}') = 0
                or length(v_entry.value #>> '{}') > v_def.max_length then
            v_errors := v_errors || to_jsonb(format('%s: entry %s must be a non-empty string of at most %s characters',
                                                    v_def.key, v_entry.key, v_def.max_length));
          end if;
        end loop;
    end case;
  end loop;
  -- Cross-field rules.
  if coalesce((p_values ->> 'retry.base_ms')::numeric, 1000) > coalesce((p_values ->> 'retry.max_ms')::numeric, 300000) then
    v_errors := v_errors || to_jsonb('retry.base_ms: must not exceed retry.max_ms'::text);
  end if;
  -- A workflow is deleted only after its commands, so commands cannot be kept longer.
  if coalesce((p_values ->> 'retention.commands_days')::numeric, 30)
     > coalesce((p_values ->> 'retention.workflows_days')::numeric, 90) then
    v_errors := v_errors || to_jsonb('retention.commands_days: must not exceed retention.workflows_days'::text);
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;
comment on function bitrix_sync._settings_errors(jsonb) is
  'Validation messages for a complete settings object against the catalogue (types, bounds, maximum lengths, allowed values and entries, cross-field rules); empty array when valid.';

create or replace function bitrix_sync._normalise_settings(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_out jsonb := p_values;
  v_def record;
  v_num numeric;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return p_values;
  end if;
  -- jsonb keeps a number's written scale: 1036.0 stays 1036.0, and a reader's ::integer cast of
  -- it fails. Whole numbers of integer keys are stored the way int4 prints them.
  for v_def in select s.key from bitrix_sync.settings s
                where s.value_type = 'integer' and jsonb_typeof(p_values -> s.key) = 'number' loop
    v_num := (p_values ->> v_def.key)::numeric;
    if v_num = trunc(v_num) and v_num between -2147483648 and 2147483647 then
      v_out := jsonb_set(v_out, array[v_def.key], to_jsonb(v_num::integer));
    end if;
  end loop;
  return v_out;
end $$;
comment on function bitrix_sync._normalise_settings(jsonb) is
  'Internal: the values with every whole number of an integer key written as int4 prints it (1036.0 and 1.0360e3 -> 1036); anything else unchanged, for _settings_errors to judge.';

create or replace function bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text default null)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_base bitrix_sync.settings_versions;
  v_version integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'settings changes need an actor for the audit'
      using errcode = 'BS004', hint = 'Pass who you are, e.g. ''ops:ivanov''.';
  end if;
  if p_changes is null or jsonb_typeof(p_changes) <> 'object' then
    raise exception 'settings changes must be a JSON object of key -> value'
      using errcode = 'BS008', hint = 'Example: ''{"batch.size": 25}''::jsonb';
  end if;
  select * into v_base from bitrix_sync.settings_versions where status = 'active';
  insert into bitrix_sync.settings_versions (settings_values, based_on, note, created_by)
  values (bitrix_sync._normalise_settings(coalesce(v_base.settings_values, '{}'::jsonb) || p_changes), v_base.version,
          p_note, btrim(p_actor))
  returning version into v_version;
  return v_version;
end $$;
comment on function bitrix_sync.propose_settings(jsonb, text, text) is
  'Creates a draft version: the active values with p_changes applied, whole numbers of integer keys normalised (1036.0 -> 1036). Validate, then activate it.';

create or replace function bitrix_sync.validate_settings_version(p_version integer)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
  v_values jsonb;
  v_errors jsonb;
begin
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'draft' then
    raise exception 'settings version % is %, only drafts are validated', p_version, v_row.status
      using errcode = 'BS002', hint = 'Propose a new version with propose_settings().';
  end if;
  -- A draft written without propose_settings() is normalised here, in its last change as a draft.
  v_values := bitrix_sync._normalise_settings(v_row.settings_values);
  v_errors := bitrix_sync._settings_errors(v_values);
  update bitrix_sync.settings_versions
     set settings_values = v_values,
         status = case when jsonb_array_length(v_errors) = 0 then 'validated' else 'rejected' end,
         validation_errors = case when jsonb_array_length(v_errors) = 0 then null else v_errors end,
         validated_at = now()
   where version = p_version;
  return v_errors;
end $$;
comment on function bitrix_sync.validate_settings_version(integer) is
  'draft -> validated, or -> rejected with the reasons (returned and stored); the values are normalised in the same change. A rejected version can never be activated.';

create or replace function bitrix_sync.activate_settings_version(p_version integer, p_actor text)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'activation needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'validated' then
    raise exception 'settings version % is %; only a validated version can be activated', p_version, v_row.status
      using errcode = 'BS008',
            hint = case when v_row.status = 'draft' then 'Run validate_settings_version() first.'
                        when v_row.status = 'rejected' then 'Fix the values listed in validation_errors and propose a new version.'
                        else 'To return to an earlier version use rollback_settings().' end;
  end if;
  -- Revalidate: the catalogue may have changed since validation.
  if jsonb_array_length(bitrix_sync._settings_errors(v_row.settings_values)) > 0 then
    raise exception 'settings version % no longer validates against the catalogue', p_version
      using errcode = 'BS008', hint = 'Propose a new version.';
  end if;
  update bitrix_sync.settings_versions set status = 'superseded', superseded_at = now() where status = 'active';
  update bitrix_sync.settings_versions set status = 'active', activated_by = btrim(p_actor), activated_at = now()
   where version = p_version
  returning * into v_row;
  perform pg_notify('bitrix_sync_settings', v_row.version::text);
  return v_row;
end $$;
comment on function bitrix_sync.activate_settings_version(integer, text) is
  'validated -> active; the previous active version becomes superseded. Records who and when, and NOTIFYs bitrix_sync_settings.';

create or replace function bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text default null)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_old bitrix_sync.settings_versions;
  v_version integer;
  v_errors jsonb;
begin
  select * into v_old from bitrix_sync.settings_versions where version = p_to_version;
  if not found or v_old.status not in ('superseded', 'active') then
    raise exception 'settings version % was never active; rollback returns to a version that was', p_to_version
      using errcode = 'BS008', hint = 'Pick a superseded version from bitrix_sync.settings_versions.';
  end if;
  insert into bitrix_sync.settings_versions (settings_values, based_on, rollback_of, note, created_by)
  values (v_old.settings_values,
          (select version from bitrix_sync.settings_versions where status = 'active'),
          p_to_version, coalesce(p_note, format('rollback to version %s', p_to_version)), coalesce(btrim(p_actor), ''))
  returning version into v_version;
  v_errors := bitrix_sync.validate_settings_version(v_version);
  if jsonb_array_length(v_errors) > 0 then
    raise exception 'version % does not validate against today''s catalogue: %', p_to_version, v_errors
      using errcode = 'BS008', hint = 'Propose corrected values instead of a rollback.';
  end if;
  return bitrix_sync.activate_settings_version(v_version, p_actor);
end $$;
comment on function bitrix_sync.rollback_settings(integer, text, text) is
  'Activates a new version carrying the values of an earlier active version (rollback_of records which); history stays linear.';

create or replace function bitrix_sync.active_settings() returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select jsonb_object_agg(s.key, coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb))
           || jsonb_build_object('_version', v.version)
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   group by v.version
$$;
comment on function bitrix_sync.active_settings() is
  'The active version''s values with catalogue defaults filled in, plus _version. What workers read and cache.';

create or replace function bitrix_sync._active_setting(p_key text) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_value jsonb;
begin
  select coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb) into v_value
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   where s.key = p_key;
  if not found then
    -- A typo here would silently disable whatever rule reads the setting.
    raise exception 'setting % is not in the catalogue', p_key
      using errcode = 'BS004', hint = 'The keys are the rows of bitrix_sync.settings.';
  end if;
  return v_value;
end $$;
comment on function bitrix_sync._active_setting(text) is
  'One key of the active settings version, the catalogue default filled in (JSON null when unset and nullable). What SQL rules read; an unknown key raises BS004.';

create or replace function bitrix_sync.alert_entity_type_id() returns integer
language plpgsql stable as $$
declare
  v_value jsonb := bitrix_sync._active_setting('alerts.entity_type_id');
  v_num numeric;
begin
  if jsonb_typeof(v_value) = 'null' then
    return null;
  end if;
  if jsonb_typeof(v_value) = 'number' then
    v_num := (v_value #>> '{}')::numeric;
    -- A version activated before the int4 bound and the normalisation may hold 1036.0 or 3e9.
    if v_num = trunc(v_num) and v_num between 1 and 2147483647 then
      return v_num::integer;
    end if;
  end if;
  raise exception 'alerts.entity_type_id of the active settings is not a usable entityTypeId'
    using errcode = 'BS023',
          hint = 'Propose the smart process''s entityTypeId as a whole number, e.g. propose_settings(''{"alerts.entity_type_id": 1036}'', ...), then validate and activate it.';
end $$;
comment on function bitrix_sync.alert_entity_type_id() is
  'The alert smart process''s entityTypeId from the active settings as int4, null when unset; BS023 when the active value is not a whole number in 1..2^31-1. What accept_webhooks() and readiness read.';

create or replace function bitrix_sync.alert_config_problem() returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_active jsonb;
begin
  begin
    if bitrix_sync.alert_entity_type_id() is null then
      return null; -- alerts are not configured: the alert receiver answers receiver_not_configured
    end if;
  exception when others then
    return 'alert_config_invalid';
  end;
  -- Configured: every alerts.* value must still pass today's catalogue (an older active version
  -- may predate a bound).
  v_active := bitrix_sync.active_settings() - '_version';
  if exists (select 1 from jsonb_array_elements_text(bitrix_sync._settings_errors(v_active)) e
              where e like 'alerts.%') then
    return 'alert_config_invalid';
  end if;
  return null;
end $$;
comment on function bitrix_sync.alert_config_problem() is
  'Readiness (§14): alert_config_invalid when alerts.entity_type_id is set but alerts cannot work with the active settings (the entity type is not a usable int4, or an alerts.* value fails today''s catalogue); null otherwise. Names no value.';

-- A fresh database starts from the catalogue defaults as version 1.
do $$
declare
  v_version integer;
begin
  if not exists (select 1 from bitrix_sync.settings_versions) then
    v_version := bitrix_sync.propose_settings('{}'::jsonb, 'migration', 'catalogue defaults');
    perform bitrix_sync.validate_settings_version(v_version);
    perform bitrix_sync.activate_settings_version(v_version, 'migration');
  end if;
end $$;
-- <<< sql/settings.sql
-- >>> sql/state_machines.sql (included)
-- State machines (§6.1, §7.1, §7.2, §7.3, §6.3): the legal edges as data, and one guard trigger per
-- table that refuses any UPDATE of the state column not on this list, whoever writes it.
-- docs/state-machines.md draws the same edges; a test keeps the two equal.

create or replace view bitrix_sync.state_edges as
select machine, from_state, to_state, event
  from (values
    -- han_app.sync_queue (§6.1)
    ('sync_queue', 'pending', 'leased', 'claim'),
    ('sync_queue', 'retry_wait', 'leased', 'claim'),
    ('sync_queue', 'leased', 'processed', 'complete'),
    ('sync_queue', 'leased', 'retry_wait', 'retry'),
    ('sync_queue', 'leased', 'dead_letter', 'dead_letter'),
    ('sync_queue', 'leased', 'cancelled', 'cancel'),
    ('sync_queue', 'leased', 'pending', 'release'),
    ('sync_queue', 'retry_wait', 'pending', 'newer_intent'),
    ('sync_queue', 'pending', 'cancelled', 'cancel'),
    ('sync_queue', 'retry_wait', 'cancelled', 'cancel'),
    -- bitrix_sync.workflow_instances (§7.1)
    ('workflow', 'created', 'running', 'start'),
    ('workflow', 'created', 'cancelled', 'cancel'),
    ('workflow', 'running', 'waiting_crm', 'await_crm'),
    ('workflow', 'running', 'waiting_retry', 'schedule_retry'),
    ('workflow', 'running', 'waiting_manual', 'need_manual'),
    ('workflow', 'running', 'succeeded', 'succeed'),
    ('workflow', 'running', 'failed', 'fail'),
    ('workflow', 'running', 'cancelled', 'cancel'),
    ('workflow', 'waiting_crm', 'running', 'crm_replied'),
    ('workflow', 'waiting_crm', 'failed', 'fail'),
    ('workflow', 'waiting_crm', 'cancelled', 'cancel'),
    ('workflow', 'waiting_retry', 'running', 'retry_due'),
    ('workflow', 'waiting_retry', 'failed', 'fail'),
    ('workflow', 'waiting_retry', 'cancelled', 'cancel'),
    ('workflow', 'waiting_manual', 'running', 'manual_resume'),
    ('workflow', 'waiting_manual', 'failed', 'fail'),
    ('workflow', 'waiting_manual', 'cancelled', 'cancel'),
    -- An admin requeues the technical dead letter that failed it (requeue_dead_letter): it starts over.
    ('workflow', 'failed', 'waiting_retry', 'requeue'),
    -- bitrix_sync.crm_commands (§7.2)
    ('command', 'pending', 'leased', 'claim'),
    ('command', 'pending', 'dead_letter', 'abandon'),
    ('command', 'leased', 'in_flight', 'send'),
    ('command', 'leased', 'pending', 'release'),
    ('command', 'leased', 'retry_wait', 'retry'),
    ('command', 'leased', 'dead_letter', 'dead_letter'),
    ('command', 'in_flight', 'succeeded', 'complete'),
    ('command', 'in_flight', 'retry_wait', 'retry'),
    ('command', 'in_flight', 'uncertain', 'no_reply'),
    ('command', 'in_flight', 'dead_letter', 'dead_letter'),
    ('command', 'retry_wait', 'pending', 'due'),
    ('command', 'retry_wait', 'dead_letter', 'abandon'),
    ('command', 'uncertain', 'reconcile', 'reconcile'),
    ('command', 'reconcile', 'succeeded', 'complete'),
    ('command', 'reconcile', 'retry_wait', 'retry'),
    ('command', 'reconcile', 'dead_letter', 'dead_letter'),
    -- bitrix_sync.webhook_inbox (§7.3)
    ('webhook', 'received', 'coalesced', 'coalesce'),
    ('webhook', 'received', 'processing', 'claim'),
    ('webhook', 'retry_wait', 'processing', 'claim'),
    ('webhook', 'processing', 'processed', 'complete'),
    ('webhook', 'processing', 'retry_wait', 'retry'),
    ('webhook', 'processing', 'dead_letter', 'dead_letter'),
    ('webhook', 'coalesced', 'processed', 'covered'),
    -- bitrix_sync.entity_external_mapping (§6.3)
    ('mapping', 'active', 'closed', 'close'),
    ('mapping', 'active', 'broken', 'mark_broken'),
    -- bitrix_sync.business_alerts (§11)
    ('alert', 'open', 'resolved', 'resolve'),
    ('alert', 'open', 'closed', 'close'),
    ('alert', 'open', 'remote_missing', 'remote_missing'),
    -- bitrix_sync.rebind_requests (§5.4)
    ('rebind', 'requested', 'in_progress', 'start'),
    ('rebind', 'requested', 'cancelled', 'cancel'),
    ('rebind', 'requested', 'failed', 'fail'),
    ('rebind', 'in_progress', 'succeeded', 'succeed'),
    ('rebind', 'in_progress', 'failed', 'fail'),
    ('rebind', 'in_progress', 'cancelled', 'cancel'),
    -- bitrix_sync.settings_versions (§12.3)
    ('settings', 'draft', 'validated', 'validate'),
    ('settings', 'draft', 'rejected', 'validate'),
    ('settings', 'validated', 'active', 'activate'),
    ('settings', 'active', 'superseded', 'supersede')
  ) as e(machine, from_state, to_state, event);
comment on view bitrix_sync.state_edges is
  'Every legal state transition of every machine, named by its event. The guard triggers and docs/state-machines.md follow this list.';

create or replace function bitrix_sync.tg__guard_transition() returns trigger
language plpgsql as $$
-- TG_ARGV[0]: machine name in state_edges; TG_ARGV[1]: the state column.
declare
  v_from text := to_jsonb(old) ->> tg_argv[1];
  v_to text := to_jsonb(new) ->> tg_argv[1];
begin
  if v_from is distinct from v_to
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = v_from and e.to_state = v_to) then
    raise exception 'illegal % transition % -> %', tg_argv[0], v_from, v_to
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg__guard_transition() is
  'BEFORE UPDATE guard: refuses a change of the state column (TG_ARGV[1]) that is not an edge of machine TG_ARGV[0] in bitrix_sync.state_edges. SQLSTATE BS002.';

create or replace function bitrix_sync.tg__forbid_delete() returns trigger
language plpgsql as $$
begin
  raise exception 'rows of %.% are history and are never deleted', tg_table_schema, tg_table_name
    using errcode = 'BS003',
          hint = 'Close or supersede the row through its bitrix_sync function instead.';
end $$;
comment on function bitrix_sync.tg__forbid_delete() is
  'BEFORE DELETE guard for history tables (mapping, settings versions, rebind requests, the cutover). SQLSTATE BS003.';

-- Guards and updated_at stamps, one per table. drop/create keeps this file re-runnable.
drop trigger if exists _100_guard_status on han_app.sync_queue;
create trigger _100_guard_status before update of status on han_app.sync_queue
  for each row execute function bitrix_sync.tg__guard_transition('sync_queue', 'status');
comment on trigger _100_guard_status on han_app.sync_queue is 'Refuses illegal queue status changes (bitrix_sync.state_edges).';

drop trigger if exists _100_guard_state on bitrix_sync.workflow_instances;
create trigger _100_guard_state before update of state on bitrix_sync.workflow_instances
  for each row execute function bitrix_sync.tg__guard_transition('workflow', 'state');
comment on trigger _100_guard_state on bitrix_sync.workflow_instances is 'Refuses illegal workflow state changes (§7.1).';

drop trigger if exists _100_guard_status on bitrix_sync.crm_commands;
create trigger _100_guard_status before update of status on bitrix_sync.crm_commands
  for each row execute function bitrix_sync.tg__guard_transition('command', 'status');
comment on trigger _100_guard_status on bitrix_sync.crm_commands is 'Refuses illegal command status changes (§7.2).';

drop trigger if exists _100_guard_status on bitrix_sync.webhook_inbox;
create trigger _100_guard_status before update of status on bitrix_sync.webhook_inbox
  for each row execute function bitrix_sync.tg__guard_transition('webhook', 'status');
comment on trigger _100_guard_status on bitrix_sync.webhook_inbox is 'Refuses illegal webhook status changes (§7.3).';

drop trigger if exists _100_guard_status on bitrix_sync.entity_external_mapping;
create trigger _100_guard_status before update of status on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__guard_transition('mapping', 'status');
comment on trigger _100_guard_status on bitrix_sync.entity_external_mapping is 'closed and broken mappings are final.';

drop trigger if exists _100_guard_status on bitrix_sync.business_alerts;
create trigger _100_guard_status before update of status on bitrix_sync.business_alerts
  for each row execute function bitrix_sync.tg__guard_transition('alert', 'status');
comment on trigger _100_guard_status on bitrix_sync.business_alerts is 'Only open alerts change status.';

drop trigger if exists _100_guard_status on bitrix_sync.rebind_requests;
create trigger _100_guard_status before update of status on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__guard_transition('rebind', 'status');
comment on trigger _100_guard_status on bitrix_sync.rebind_requests is 'Refuses illegal rebind request status changes (§5.4).';

drop trigger if exists _100_guard_status on bitrix_sync.settings_versions;
create trigger _100_guard_status before update of status on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__guard_transition('settings', 'status');
comment on trigger _100_guard_status on bitrix_sync.settings_versions is 'Only validated versions become active (§12.3).';

drop trigger if exists _200_forbid_delete on bitrix_sync.entity_external_mapping;
create trigger _200_forbid_delete before delete on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.entity_external_mapping is 'Mapping history is never deleted (§4).';

drop trigger if exists _200_forbid_delete on bitrix_sync.settings_versions;
create trigger _200_forbid_delete before delete on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.settings_versions is 'Settings audit is never deleted.';

drop trigger if exists _200_forbid_delete on bitrix_sync.rebind_requests;
create trigger _200_forbid_delete before delete on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.rebind_requests is 'Rebind audit is never deleted.';

do $$
declare
  v_table text;
begin
  foreach v_table in array array['entity_external_mapping', 'workflow_instances', 'crm_commands', 'business_alerts',
                                 'rebind_requests', 'contact_snapshots', 'reconciliation_cursors']
  loop
    execute format('drop trigger if exists _900_set_updated_at on bitrix_sync.%I', v_table);
    execute format('create trigger _900_set_updated_at before update on bitrix_sync.%I
                      for each row execute function bitrix_sync.tg__set_updated_at()', v_table);
    execute format('comment on trigger _900_set_updated_at on bitrix_sync.%I is %L', v_table,
                   'Stamps updated_at on every change.');
  end loop;
end $$;
-- <<< sql/state_machines.sql
-- >>> sql/workflows.sql (included)
-- Workflows (§7.1): one active workflow per user; persisted transitions by event name, fenced by
-- the lease token of the worker stepping the workflow.

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text
) returns table (workflow_id uuid, action text)
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
      -- A rebind is never joined: converging to the App's intent would drop it (issue 11). The
      -- intent is held on its row, the newest one winning as in a join, and starts as the next
      -- workflow when the rebind ends (tg_workflow_instances__start_held_intent), so the App change
      -- is carried out against the mapping the rebind left.
      if v_row.workflow_type = 'contact.rebind' then
        if v_row.held_intent_type is not distinct from p_intent_type
           and v_row.held_content_hash is not distinct from p_content_hash then
          return query select v_row.id, 'unchanged'::text;
          return;
        end if;
        update bitrix_sync.workflow_instances w
           set held_intent_type = p_intent_type, held_source_task_id = p_source_task_id,
               held_content_hash = p_content_hash, held_at = now()
         where w.id = v_row.id;
        return query select v_row.id, 'held'::text;
        return;
      end if;
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash)
      returning * into v_row;
    exception when unique_violation then
      -- Two intents of one user claimed at once: the other call started the workflow first and has
      -- committed by now (the index waited for it), so look again and join it.
      if v_try = 3 then
        raise;
      end if;
      continue;
    end;
    perform pg_notify('bitrix_sync_workflows', '');
    return query select v_row.id, 'started'::text;
    return;
  end loop;
end $$;
comment on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text) is
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged). An active contact.rebind is not joined: the intent is held on it (action held) and starts when the rebind ends.';

create or replace function bitrix_sync.tg_workflow_instances__start_held_intent() returns trigger
language plpgsql as $$
begin
  -- The rebind's row has just left the active states, so the one-active-per-user index admits the
  -- next workflow. A concurrent intake waiting on the row lock finds this one and joins it.
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
  values (new.held_intent_type, new.held_intent_type, new.user_id, new.held_source_task_id, new.held_content_hash);
  perform pg_notify('bitrix_sync_workflows', '');
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__start_held_intent() is
  'AFTER UPDATE OF state trigger: when a workflow holding an App intent (a contact.rebind) finishes, however it finishes, the held intent starts as the user''s next workflow.';

drop trigger if exists _400_start_held_intent on bitrix_sync.workflow_instances;
create trigger _400_start_held_intent after update of state on bitrix_sync.workflow_instances
  for each row
  when (new.held_intent_type is not null and new.state in ('succeeded', 'failed', 'cancelled')
        and old.state not in ('succeeded', 'failed', 'cancelled'))
  execute function bitrix_sync.tg_workflow_instances__start_held_intent();
comment on trigger _400_start_held_intent on bitrix_sync.workflow_instances is
  'Starts the App intent held during a rebind once the rebind has finished (after _300_close_rebind_request).';


create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.workflow_instances
language plpgsql as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
    return;
  end if;
  return query
  with picked as (
    select w.id from bitrix_sync.workflow_instances w
     where w.state in ('created', 'running', 'waiting_retry')
       and w.next_attempt_at <= now()
       and (w.lease_token is null or w.locked_until < now())
     order by w.next_attempt_at, w.created_at
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.workflow_instances w
     set state = 'running',
         lease_token = gen_random_uuid(),
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         attempt_count = w.attempt_count + 1
    from picked
   where w.id = picked.id
  returning w.*;
end $$;
comment on function bitrix_sync.claim_workflows(text, integer, interval) is
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due). Returns nothing before perform_cutover().';

create or replace function bitrix_sync.fire_workflow_event(
  p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb default '{}'::jsonb
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_to text;
  v_bad text;
begin
  select * into v_row from bitrix_sync.workflow_instances where id = p_id for update;
  if not found then
    raise exception 'workflow % does not exist', p_id
      using errcode = 'BS005', hint = 'Check the workflow id.';
  end if;
  if v_row.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  select e.to_state into v_to from bitrix_sync.state_edges e
   where e.machine = 'workflow' and e.from_state = v_row.state and e.event = p_event;
  if v_to is null then
    raise exception 'workflow event % is not allowed in state %', p_event, v_row.state
      using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
  end if;
  select string_agg(k, ', ') into v_bad from jsonb_object_keys(coalesce(p_changes, '{}'::jsonb)) k
   where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                   'processed_revision');
  if v_bad is not null then
    raise exception 'workflow event cannot change %', v_bad
      using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
  end if;
  if p_changes ? 'last_error_code' and p_changes ->> 'last_error_code' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'last_error_code');
  end if;
  if p_changes ? 'outcome' and p_changes ->> 'outcome' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'outcome');
  end if;

  update bitrix_sync.workflow_instances w
     set state = v_to,
         current_step = coalesce(p_changes ->> 'current_step', w.current_step),
         step_data = case when p_changes ? 'step_data' then p_changes -> 'step_data' else w.step_data end,
         contact_id = case when p_changes ? 'contact_id' then p_changes ->> 'contact_id' else w.contact_id end,
         outcome = case when p_changes ? 'outcome' then p_changes ->> 'outcome' else w.outcome end,
         last_error_code = case when p_changes ? 'last_error_code' then p_changes ->> 'last_error_code' else w.last_error_code end,
         next_attempt_at = coalesce((p_changes ->> 'next_attempt_at')::timestamptz,
                                    case when v_to = 'running' then w.next_attempt_at else now() end),
         processed_revision = coalesce((p_changes ->> 'processed_revision')::integer, w.processed_revision),
         -- The lease belongs to a worker stepping a running workflow; any other state releases it.
         lease_token = case when v_to = 'running' then w.lease_token end,
         locked_by = case when v_to = 'running' then w.locked_by end,
         locked_until = case when v_to = 'running' then w.locked_until end,
         finished_at = case when v_to in ('succeeded', 'failed', 'cancelled') then now() end
   where w.id = p_id
  returning * into v_row;
  if v_to in ('waiting_retry', 'running') then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fire_workflow_event(uuid, uuid, text, jsonb) is
  'Moves a workflow along the edge named p_event from its current state (bitrix_sync.state_edges), applying the allowed changes. The caller must present the current lease token (null when none is held); stale holders get BS001, illegal events BS002.';

create or replace function bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_workflow_lease(uuid, uuid, interval) is
  'Extends the lease of a running workflow. Refuses a stale token (BS001).';

create or replace function bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid)
returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  select * into v_row from bitrix_sync.workflow_instances
   where id = p_id and state = 'running' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._held_workflow(uuid, uuid) is
  'Internal: the running workflow, locked, when the caller presents its current lease token; otherwise BS001.';

create or replace function bitrix_sync.save_workflow_step(
  p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text default null
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  if p_step_data is null or jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  if p_current_step is not null and p_current_step !~ '^[a-z][a-z0-9_]{0,63}$' then
    raise exception 'a step name is a snake_case identifier of at most 64 characters'
      using errcode = 'BS004', hint = 'Pass the planner''s step name, e.g. find_by_phone.';
  end if;
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  update bitrix_sync.workflow_instances
     set step_data = p_step_data, current_step = coalesce(p_current_step, current_step)
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.save_workflow_step(uuid, uuid, jsonb, text) is
  'Persists the step state (and, when given, the step name) of a running workflow without a state change. Fenced by the workflow''s lease token (BS001).';

create or replace function bitrix_sync._workflow_first_attempt(p_row bitrix_sync.workflow_instances)
returns timestamptz
language sql stable as $$
  -- Intake starts a workflow as soon as it is created; an admin's requeue starts it over.
  select coalesce(p_row.requeued_at, p_row.created_at)
$$;
comment on function bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances) is
  'Internal: where a workflow''s retry horizon starts: its last requeue by an admin, else its creation.';

create or replace function bitrix_sync.schedule_workflow_retry(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._workflow_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    insert into bitrix_sync.technical_dead_letters
      (source, source_id, workflow_id, operation, error_code, attempt_count, first_attempt_at, deadline_at,
       correlation_id)
    values ('workflow', v_row.id::text, v_row.id, v_row.workflow_type, 'retry_horizon_exceeded',
            v_row.attempt_count, bitrix_sync._workflow_first_attempt(v_row), v_deadline, v_row.correlation_id);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.schedule_workflow_retry(uuid, uuid, text, interval) is
  'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at, or the last requeue, + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';
-- <<< sql/workflows.sql
-- >>> sql/status.sql (included)
-- Status views (§14): counts and ages only, never PII, Contact/user IDs or raw errors. Readable by
-- bitrix_sync_admin and used by GET /internal/sync/v1/status and /metrics.
--
-- Each view reads live rows only, through a partial index whose predicate is the view's WHERE
-- (written the same way, so the planner can prove it), never the finished history that retention
-- deletes later: a scrape costs the same with a year of history as with a day
-- (test/integration/status-plans.test.ts).

create or replace view bitrix_sync.status_queue as
select q.status, count(*)::bigint as count,
       extract(epoch from now() - min(q.created_at))::bigint as oldest_age_sec
  from han_app.sync_queue q
 where q.status in ('pending', 'leased', 'retry_wait', 'dead_letter')
 group by q.status;
comment on view bitrix_sync.status_queue is
  'han_app.sync_queue depth and oldest age by live status (pending, leased, retry_wait) and dead_letter; processed and cancelled rows are history, not depth.';

create or replace view bitrix_sync.status_workflows as
select w.workflow_type, w.state, count(*)::bigint as count,
       extract(epoch from now() - min(w.created_at))::bigint as oldest_age_sec
  from bitrix_sync.workflow_instances w
 where w.state not in ('succeeded', 'failed', 'cancelled')
 group by w.workflow_type, w.state;
comment on view bitrix_sync.status_workflows is 'Active workflows by type and state, with the oldest age.';

create or replace view bitrix_sync.status_commands as
select c.command_type, c.status, count(*)::bigint as count,
       extract(epoch from now() - min(c.created_at))::bigint as oldest_age_sec
  from bitrix_sync.crm_commands c
 where c.status <> 'succeeded'
 group by c.command_type, c.status;
comment on view bitrix_sync.status_commands is 'Unfinished and dead-lettered CRM commands by type and status.';

create or replace view bitrix_sync.status_webhooks as
select w.receiver, w.status, count(*)::bigint as count,
       extract(epoch from now() - min(w.received_at))::bigint as oldest_age_sec
  from bitrix_sync.webhook_inbox w
 where w.status <> 'processed'
 group by w.receiver, w.status;
comment on view bitrix_sync.status_webhooks is 'Unprocessed webhook inbox rows by receiver and status (webhook lag).';

create or replace view bitrix_sync.status_dead_letters as
select d.source, d.operation, d.error_code, count(*)::bigint as count,
       extract(epoch from now() - min(d.created_at))::bigint as oldest_age_sec
  from bitrix_sync.technical_dead_letters d
 where d.resolved_at is null
 group by d.source, d.operation, d.error_code;
comment on view bitrix_sync.status_dead_letters is 'Open technical dead letters by source, operation and safe code.';

create or replace view bitrix_sync.status_alerts as
select a.alert_type, a.severity, count(*)::bigint as open_count,
       count(*) filter (where a.first_occurred_at < now() - make_interval(hours =>
         (select (bitrix_sync._active_setting('alerts.sla_hours') #>> '{}')::integer)))::bigint as sla_overdue
  from bitrix_sync.business_alerts a
 where a.status = 'open'
 group by a.alert_type, a.severity;
comment on view bitrix_sync.status_alerts is 'Open business alerts by type and severity, with how many are past the SLA.';

create or replace view bitrix_sync.status_alert_mirror as
select a.crm_sync_status as mirror_status, count(*)::bigint as count,
       extract(epoch from now() - min(a.updated_at))::bigint as oldest_age_sec
  from bitrix_sync.business_alerts a
 where a.crm_sync_status <> 'synced'
 group by a.crm_sync_status;
comment on view bitrix_sync.status_alert_mirror is
  'Business alerts whose smart-process item is behind: pending (a change not yet sent, e.g. alerts.entity_type_id unset or an unanswered add being looked up) and failed (could not be mirrored; see technical_dead_letters).';
-- Privileges: sql/privileges.sql (the runtime reads it for /metrics and the status endpoint, an
-- admin from psql).
-- <<< sql/status.sql
-- >>> sql/alert_mirror.sql (included)
-- Alert mirroring that recovers (§11, §7.2, issue 11). An alert command that fails before it is sent
-- or is refused for rate is retried like any command (retry_command: backoff and horizon). One that
-- got no answer is `uncertain`, and unlike a workflow's command no step is waiting for it, so the
-- alert lane recovers it here:
--   - an alert.update sets the same values again: it is sent again after the backoff, within the
--     command's retry horizon (uncertain -> reconcile -> retry_wait, or dead_letter past it);
--   - an alert.add may have created the item: it waits in `reconcile` while an alert.list looks the
--     item up by the alert's alert_number field (else its fingerprint field, else the item title,
--     which carries the alert number). Found: the add succeeded and the item is recorded. Not
--     found: the same add goes out again. The lookup failed for good: the add is dead-lettered
--     (alert_lookup_failed) and never re-sent blindly.
-- An add that may have landed and was never looked up (dead-lettered that way, then requeued or
-- raised again) is looked up before any new add too: one alert never gets two smart-process items.
-- src/alerts/recover.ts drives these functions; src/workflows/pump.ts settles the commands.

create or replace function bitrix_sync._alert_add_unsafe(p_alert_id bigint) returns boolean
language sql stable as $$
  -- An add whose item may exist, and that no successful lookup has checked since it was sent.
  select exists (
    select 1 from bitrix_sync.crm_commands a
     where a.alert_id = p_alert_id and a.command_type = 'alert.add'
       and (a.status in ('uncertain', 'reconcile')
            or (a.status = 'dead_letter' and a.last_error_code = 'alert_lookup_failed'))
       and a.id > coalesce((select max(l.id) from bitrix_sync.crm_commands l
                             where l.alert_id = p_alert_id and l.command_type = 'alert.list'
                               and l.status = 'succeeded' and l.params ->> 'purpose' = 'find'), 0))
$$;
comment on function bitrix_sync._alert_add_unsafe(bigint) is
  'Internal: an alert.add of this alert may have created an item that no lookup has seen since: a new add must wait for an alert.list lookup.';

create or replace function bitrix_sync.recover_alert_command(p_id bigint, p_delay interval)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  -- No lease: an uncertain command has none. The row lock and the status test fence two lanes
  -- that pick the same command; the second gets null and moves on.
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and alert_id is not null and status = 'uncertain'
   for update skip locked;
  if not found then
    return null;
  end if;
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  if v_row.command_type = 'alert.add' then
    -- Waits for issue_alert_lookup() / resolve_alert_lookup().
    perform pg_notify('bitrix_sync_workflows', '');
    return v_row;
  end if;
  -- alert.update (and any read): sending the same values again cannot duplicate anything.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', null, null);
    perform bitrix_sync.mark_alert_mirror_failed(v_row.alert_id);
    return v_row;
  end if;
  update bitrix_sync.crm_commands
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'), deadline_at = v_deadline
   where id = p_id
  returning * into v_row;
  perform pg_notify('bitrix_sync_commands', '');
  return v_row;
end $$;
comment on function bitrix_sync.recover_alert_command(bigint, interval) is
  'An unanswered alert command: uncertain -> reconcile. An alert.add then waits for a lookup of its item; an alert.update goes on to retry_wait after p_delay, or to dead_letter (retry_horizon_exceeded, technical DLQ row, alert failed) past its horizon. Returns null when the command is not uncertain any more (another lane took it).';

create or replace function bitrix_sync.alerts_to_look_up(p_limit integer default 20)
returns table (alert_id bigint, alert_number bigint, alert_type text, fingerprint text)
language sql stable as $$
  select a.id, a.alert_number, a.alert_type::text, a.fingerprint::text
    from bitrix_sync.business_alerts a
   where a.id in (
           -- an unanswered add waiting for its lookup
           select c.alert_id from bitrix_sync.crm_commands c
            where c.command_type = 'alert.add' and c.status = 'reconcile' and c.alert_id is not null
           union
           -- a change to send, no item yet, and an earlier add that may have landed
           select u.id from bitrix_sync.business_alerts u
            where u.crm_sync_status = 'pending' and u.item_id is null and bitrix_sync._alert_add_unsafe(u.id))
     and not exists (select 1 from bitrix_sync.crm_commands l
                      where l.alert_id = a.id and l.command_type = 'alert.list'
                        and l.status in ('pending', 'leased', 'in_flight', 'retry_wait'))
   order by a.id
   limit greatest(p_limit, 1)
$$;
comment on function bitrix_sync.alerts_to_look_up(integer) is
  'Alerts whose item must be looked up before anything else is sent: an alert.add in reconcile, or a pending alert without an item whose earlier add may have landed; none with a lookup already under way.';

create or replace function bitrix_sync.issue_alert_lookup(p_alert_id bigint, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
begin
  if p_params is null or p_params ->> 'purpose' is distinct from 'find' or jsonb_typeof(p_params -> 'match') <> 'object' then
    raise exception 'an alert lookup needs params {entityTypeId, purpose: "find", match: {field, value}}'
      using errcode = 'BS004', hint = 'Build it with lookupMatch() of src/alerts/recover.ts.';
  end if;
  -- One lookup at a time per alert: the alert row is the lock.
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  if exists (select 1 from bitrix_sync.crm_commands l
              where l.alert_id = p_alert_id and l.command_type = 'alert.list'
                and l.status in ('pending', 'leased', 'in_flight', 'retry_wait')) then
    return null;
  end if;
  return bitrix_sync.issue_alert_command(p_alert_id, 'alert.list', p_params);
end $$;
comment on function bitrix_sync.issue_alert_lookup(bigint, jsonb) is
  'Queues an alert.list that looks for the alert''s item by its alert_number or fingerprint field, or its title (params.purpose = find). Returns null when a lookup of that alert is already under way.';

create or replace function bitrix_sync.resolve_alert_lookup(p_alert_id bigint, p_items jsonb)
returns text
language plpgsql as $$
declare
  v_item bigint;
  v_stage text;
  v_add bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  if p_items is null or jsonb_typeof(p_items) <> 'array' then
    raise exception 'lookup items must be a JSON array of {id, stage_id}'
      using errcode = 'BS004', hint = 'Pass what the alert.list returned, e.g. ''[{"id": 7, "stage_id": "DT1040_7:NEW"}]''.';
  end if;
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  -- A fingerprint repeats across an alert and the ones that follow it after a terminal stage; an
  -- item another alert already owns is not this alert's.
  select (i ->> 'id')::bigint, i ->> 'stage_id' into v_item, v_stage
    from jsonb_array_elements(p_items) i
   where not exists (select 1 from bitrix_sync.business_alerts b
                      where b.item_id = (i ->> 'id')::bigint and b.id <> p_alert_id)
   order by (i ->> 'id')::bigint
   limit 1;
  if v_item is not null then
    perform bitrix_sync.record_alert_item(p_alert_id, v_item, v_stage);
  end if;
  for v_add in
    select * from bitrix_sync.crm_commands
     where alert_id = p_alert_id and command_type = 'alert.add' and status = 'reconcile'
     order by id
     for update
  loop
    if v_item is not null then
      update bitrix_sync.crm_commands
         set status = 'succeeded', completed_at = now(), last_error_code = null,
             response = jsonb_build_object('item_id', v_item, 'stage_id', v_stage, 'recovered', true)
       where id = v_add.id;
    else
      -- The lookup proved the add did not land: the same add goes out again, within its horizon.
      v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_add));
      if now() > v_deadline then
        perform bitrix_sync._dead_letter_command_row(v_add, 'retry_horizon_exceeded', null, null);
        perform bitrix_sync.mark_alert_mirror_failed(p_alert_id);
      else
        update bitrix_sync.crm_commands
           set status = 'retry_wait', next_attempt_at = now(), last_error_code = 'reconciled_not_applied',
               deadline_at = v_deadline
         where id = v_add.id;
        perform pg_notify('bitrix_sync_commands', '');
      end if;
    end if;
  end loop;
  return case when v_item is null then 'not_found' else 'found' end;
end $$;
comment on function bitrix_sync.resolve_alert_lookup(bigint, jsonb) is
  'The outcome of an alert''s item lookup (called in the lookup''s completion transaction): an item that no other alert owns is recorded on the alert and the alert.add waiting in reconcile succeeds with it; no such item: the waiting add goes back to retry_wait and is sent again (dead_letter past its horizon). Returns found or not_found.';

create or replace function bitrix_sync.fail_alert_lookup(p_alert_id bigint)
returns integer
language plpgsql as $$
declare
  v_add bitrix_sync.crm_commands;
  v_count integer := 0;
begin
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  for v_add in
    select * from bitrix_sync.crm_commands
     where alert_id = p_alert_id and command_type = 'alert.add' and status = 'reconcile'
     for update
  loop
    perform bitrix_sync._dead_letter_command_row(v_add, 'alert_lookup_failed', null, null);
    v_count := v_count + 1;
  end loop;
  -- Until someone looks, nothing may be sent for this alert: an add could make a second item.
  update bitrix_sync.business_alerts set crm_sync_status = 'failed'
   where id = p_alert_id and crm_sync_status <> 'failed';
  return v_count;
end $$;
comment on function bitrix_sync.fail_alert_lookup(bigint) is
  'The lookup of an alert''s item failed for good: the alert.adds waiting in reconcile go to dead_letter (alert_lookup_failed) with a technical DLQ row, and the alert is marked failed (visible in status_alert_mirror) until an admin requeues it, which looks the item up again before anything is added. Returns how many adds.';

-- Privileges: sql/privileges.sql.
-- <<< sql/alert_mirror.sql
-- >>> sql/dead_letters.sql (included)
-- Technical dead letters an admin can act on (§9, issue 11; recipes in docs/admin.md). Each function
-- is security definer with a pinned search_path, runs as bitrix_sync_admin only, records who and why
-- on the dead letter itself and in admin_actions in the same transaction, and refuses with a
-- SQLSTATE, a sentence and a HINT that says what to do instead:
--   list_dead_letters        what is open (or everything), with what a requeue would do or why not;
--   acknowledge_dead_letter  looked at, nothing re-sent: the entry leaves the open-DLQ gauge;
--   requeue_dead_letter      a new, fenced attempt through the normal state machine:
--     sync_queue  a new pending intent row with the same task, user and payload (fresh horizon);
--     webhook     a new inbox event for the same entity (event_type requeue; fresh horizon);
--     workflow / a workflow's crm_command
--                 the failed workflow starts over from its first step (failed -> waiting_retry,
--                 requeue): every step reads again and issues its command as a new row, so a write
--                 is never re-sent blindly; its horizon counts from the requeue;
--     an alert's crm_command
--                 the alert is mirrored again (crm_sync_status failed -> pending): a new command,
--                 preceded by a lookup when an earlier add may have created the item.
-- Entries that one restart covers (the same workflow, the same alert) are resolved together.

create or replace function bitrix_sync._open_dead_letter(p_id bigint) returns bitrix_sync.technical_dead_letters
language plpgsql as $$
declare
  v_row bitrix_sync.technical_dead_letters;
begin
  select * into v_row from bitrix_sync.technical_dead_letters where id = p_id for update;
  if not found then
    raise exception 'technical dead letter % does not exist', p_id
      using errcode = 'BS040', hint = 'List them with: select * from bitrix_sync.list_dead_letters();';
  end if;
  if v_row.resolved_at is not null then
    raise exception 'technical dead letter % was already % by % at %', p_id, v_row.resolution, v_row.resolved_by,
                    to_char(v_row.resolved_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
      using errcode = 'BS041',
            hint = case when v_row.resolution = 'requeued'
                        then format('Its new attempt is %s; follow that instead.', v_row.requeued_to)
                        else 'Nothing to do: a resolved dead letter stays resolved.' end;
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._open_dead_letter(bigint) is
  'Internal: the open dead letter, locked; BS040 when there is none with that id, BS041 when it is already resolved.';

create or replace function bitrix_sync._requeue_refusal(p_dl bitrix_sync.technical_dead_letters) returns jsonb
language plpgsql stable as $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
  v_alert bitrix_sync.business_alerts;
  v_newer text;
  v_ack constant text := 'If nothing needs to run again, acknowledge it: select * from bitrix_sync.acknowledge_dead_letter(<id>, ''ops:<you>'', ''<why>'');';
begin
  if p_dl.source = 'sync_queue' then
    if p_dl.source_id ~ '^[0-9a-f-]{36}$' then
      select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid;
    end if;
    if v_q.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent row no longer exists', 'hint', v_ack);
    elsif v_q.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its intent row is %s, not dead_letter', v_q.status), 'hint', v_ack);
    elsif v_q.task_type not in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind') then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent is of a task type the service does not run', 'hint', v_ack);
    elsif exists (select 1 from han_app.sync_queue a
                   where a.dedup_key = v_q.dedup_key and a.status in ('pending', 'leased', 'retry_wait')) then
      return jsonb_build_object('code', 'BS042', 'message', 'a newer intent of the same kind for the same user is queued and carries this one', 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.source = 'webhook' then
    if p_dl.source_id ~ '^[0-9]{1,18}$' then
      select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint;
    end if;
    if v_hook.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its inbox event no longer exists', 'hint', v_ack);
    elsif v_hook.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its inbox event is %s, not dead_letter', v_hook.status), 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.workflow_id is not null then
    select * into v_wf from bitrix_sync.workflow_instances where id = p_dl.workflow_id;
    if not found then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow no longer exists', 'hint', v_ack);
    elsif v_wf.state in ('succeeded', 'cancelled') then
      return jsonb_build_object('code', 'BS042', 'message', format('its workflow finished as %s without it', v_wf.state), 'hint', v_ack);
    elsif v_wf.state <> 'failed' then
      return jsonb_build_object('code', 'BS043',
        'message', format('its workflow is still %s: its own retries, or an admin''s decision on a parked workflow, move it on', v_wf.state),
        'hint', 'Wait until the workflow has failed or finished (bitrix_sync.status_workflows), then requeue or acknowledge.');
    end if;
    select w.state into v_newer from bitrix_sync.workflow_instances w
     where w.user_id = v_wf.user_id and w.created_at > v_wf.created_at and w.id <> v_wf.id
     order by w.created_at desc limit 1;
    if v_newer in ('succeeded', 'failed', 'cancelled') then
      return jsonb_build_object('code', 'BS042',
        'message', 'a newer workflow of the same user has run since; running this older one again could undo it',
        'hint', v_ack);
    elsif v_newer is not null then
      return jsonb_build_object('code', 'BS043', 'message', 'a newer workflow of the same user is running',
        'hint', 'Wait until it finishes; it reads the user''s current data, so it usually makes this dead letter moot. Then acknowledge or requeue.');
    end if;
    if v_wf.workflow_type = 'contact.rebind' and not exists (
         select 1 from bitrix_sync.rebind_requests r
          where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its rebind request is finished; a rebind is not run again by a requeue',
        'hint', 'Ask again with select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''<Contact ID>'', ''<why>'', ''ops:<you>''); then acknowledge this dead letter.');
    end if;
    if exists (select 1 from bitrix_sync.crm_commands c
                where c.workflow_id = v_wf.id and c.status in ('uncertain', 'reconcile')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow has a write whose outcome is still unknown',
        'hint', v_ack);
    end if;
    return null;
  end if;

  -- A command of a business alert.
  select * into v_cmd from bitrix_sync.crm_commands where id = p_dl.command_id;
  if not found or v_cmd.alert_id is null then
    return jsonb_build_object('code', 'BS042', 'message', 'its command no longer exists', 'hint', v_ack);
  end if;
  select * into v_alert from bitrix_sync.business_alerts where id = v_cmd.alert_id;
  if v_alert.status = 'remote_missing' then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert''s smart-process item was deleted in the CRM', 'hint', v_ack);
  end if;
  if exists (select 1 from bitrix_sync.crm_commands n
              where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list'
                and n.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')) then
    return jsonb_build_object('code', 'BS043', 'message', 'a newer command of the same alert is under way',
      'hint', 'Wait for it (bitrix_sync.status_alert_mirror); if it succeeds, acknowledge this dead letter.');
  end if;
  if v_alert.crm_sync_status = 'synced' and exists (
       select 1 from bitrix_sync.crm_commands n
        where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list' and n.status = 'succeeded') then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert has been mirrored since', 'hint', v_ack);
  end if;
  return null;
end $$;
comment on function bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters) is
  'Internal: why a dead letter cannot be requeued now, as {code, message, hint} (BS042 nothing to run again, BS043 something else is running), or null when it can.';

create or replace function bitrix_sync._requeue_target(p_dl bitrix_sync.technical_dead_letters) returns text
language plpgsql as $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_id text;
  v_alert bigint;
begin
  if p_dl.source = 'sync_queue' then
    select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid for update;
    -- The same intent as a new row: created now, so its horizon and the cutover watermark count from now.
    insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, payload_json)
    values (v_q.task_type, v_q.entity_type, v_q.entity_id, v_q.dedup_key, v_q.payload_json)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_queue', v_q.task_type);
    return 'sync_queue:' || v_id;
  end if;

  if p_dl.source = 'webhook' then
    select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint for update;
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    values (v_hook.receiver, 'requeue', v_hook.entity_type_id, v_hook.entity_id)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_webhooks', v_hook.receiver);
    return 'webhook:' || v_id;
  end if;

  if p_dl.workflow_id is not null then
    -- failed -> waiting_retry (requeue): due now, from its first step, with a horizon of its own.
    update bitrix_sync.workflow_instances
       set state = 'waiting_retry', current_step = 'start', step_data = '{}'::jsonb, outcome = null,
           last_error_code = null, finished_at = null, requeued_at = now(), next_attempt_at = now(),
           attempt_count = 0, deadline_at = bitrix_sync._retry_deadline(now()),
           lease_token = null, locked_by = null, locked_until = null
     where id = p_dl.workflow_id and state = 'failed';
    perform pg_notify('bitrix_sync_workflows', '');
    return 'workflow:' || p_dl.workflow_id::text;
  end if;

  select c.alert_id into v_alert from bitrix_sync.crm_commands c where c.id = p_dl.command_id;
  -- The mirror sends the alert's current state again; an add that may have landed is looked up first.
  update bitrix_sync.business_alerts set crm_sync_status = 'pending'
   where id = v_alert and crm_sync_status <> 'pending';
  perform pg_notify('bitrix_sync_workflows', '');
  return 'alert:' || v_alert::text;
end $$;
comment on function bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters) is
  'Internal (requeue_dead_letter, after _requeue_refusal said yes): starts the new attempt and returns what carries it (sync_queue:<id>, webhook:<id>, workflow:<id>, alert:<id>).';

create or replace function bitrix_sync._covered_dead_letters(p_dl bitrix_sync.technical_dead_letters) returns bigint[]
language sql stable as $$
  -- The open entries one new attempt answers: the workflow's, or the alert's, or just this one.
  select coalesce(array_agg(d.id order by d.id), array[p_dl.id])
    from bitrix_sync.technical_dead_letters d
   where d.resolved_at is null
     and (d.id = p_dl.id
          or (p_dl.workflow_id is not null and d.workflow_id = p_dl.workflow_id)
          or (p_dl.source = 'crm_command' and p_dl.workflow_id is null and d.source = 'crm_command'
              and d.command_id in (select c.id from bitrix_sync.crm_commands c
                                    where c.alert_id = (select x.alert_id from bitrix_sync.crm_commands x
                                                         where x.id = p_dl.command_id))))
$$;
comment on function bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters) is
  'Internal: the ids of the open dead letters a requeue of p_dl answers: every open entry of its workflow, or of its alert''s commands, or p_dl alone.';

create or replace function bitrix_sync.list_dead_letters(p_include_resolved boolean default false, p_limit integer default 100)
returns table (
  id bigint, source text, operation text, error_code text, http_status integer, bitrix_error text,
  attempt_count integer, first_attempt_at timestamptz, deadline_at timestamptz, created_at timestamptz,
  age_sec bigint, source_id text, workflow_id uuid, command_id bigint, workflow_type text, workflow_state text,
  requeue text, resolution text, resolved_at timestamptz, resolved_by text, requeued_to text
)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_limit is null or p_limit not between 1 and 10000 then
    raise exception 'the limit must be between 1 and 10000, got %', p_limit
      using errcode = 'BS004', hint = 'Example: select * from bitrix_sync.list_dead_letters(false, 500);';
  end if;
  return query
  select d.id, d.source::text, d.operation::text, d.error_code::text, d.http_status, d.bitrix_error::text,
         d.attempt_count, d.first_attempt_at, d.deadline_at, d.created_at,
         extract(epoch from now() - d.created_at)::bigint, d.source_id::text, d.workflow_id, d.command_id,
         w.workflow_type::text, w.state::text,
         case when d.resolved_at is not null then null
              when r.why is null then 'ready'
              else (r.why ->> 'code') || ': ' || (r.why ->> 'message') end,
         d.resolution::text, d.resolved_at, d.resolved_by::text, d.requeued_to::text
    from bitrix_sync.technical_dead_letters d
    left join bitrix_sync.workflow_instances w on w.id = d.workflow_id
    left join lateral (select bitrix_sync._requeue_refusal(d) as why) r on d.resolved_at is null
   where d.id in (select x.id from bitrix_sync.technical_dead_letters x
                   where p_include_resolved or x.resolved_at is null
                   order by x.id desc
                   limit p_limit)
   order by d.id;
end $$;
comment on function bitrix_sync.list_dead_letters(boolean, integer) is
  'Admin (§9): the newest p_limit technical dead letters, open ones only unless p_include_resolved, oldest first, with safe columns (codes, counts, times, internal ids; the reasons are in admin_actions), the state of their workflow, and `requeue`: ready, or the SQLSTATE and sentence a requeue would refuse with now.';

create or replace function bitrix_sync._resolve_dead_letters(
  p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text
) returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language sql as $$
  with resolved as (
    update bitrix_sync.technical_dead_letters d
       set resolved_at = now(), resolved_by = btrim(p_operator), resolution = p_resolution,
           resolution_reason = btrim(p_reason), requeued_to = p_target
     where d.id = any(p_ids) and d.resolved_at is null
    returning d.*
  ), audit as (
    -- One audit row per entry, with the admin functions' others (docs/admin.md).
    insert into bitrix_sync.admin_actions (action, workflow_id, dead_letter_id, reason, operator_id)
    select case p_resolution when 'requeued' then 'requeue_dead_letter' else 'acknowledge_dead_letter' end,
           r.workflow_id, r.id, btrim(p_reason), btrim(p_operator)
      from resolved r
  )
  select r.id, r.source::text, r.operation::text, r.resolution::text, r.requeued_to::text, r.resolved_at,
         r.resolved_by::text
    from resolved r
   order by r.id
$$;
comment on function bitrix_sync._resolve_dead_letters(bigint[], text, text, text, text) is
  'Internal: marks open dead letters resolved with the resolution, operator, reason and (requeued) target, and writes an admin_actions row for each; returns them.';

create or replace function bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text)
returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_dl bitrix_sync.technical_dead_letters;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  return query select * from bitrix_sync._resolve_dead_letters(array[v_dl.id], 'acknowledged', p_operator, p_reason, null);
end $$;
comment on function bitrix_sync.acknowledge_dead_letter(bigint, text, text) is
  'Admin (§9): an open technical dead letter was looked at and nothing is sent again. Writes resolved_at, resolved_by, resolution = acknowledged and the reason; the entry leaves status_dead_letters and the open-DLQ gauge. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved.';

create or replace function bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text)
returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_dl bitrix_sync.technical_dead_letters;
  v_refusal jsonb;
  v_target text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  -- Lock what the new attempt starts from, so the checks below hold until commit.
  if v_dl.workflow_id is not null then
    perform 1 from bitrix_sync.workflow_instances w where w.id = v_dl.workflow_id for update;
  elsif v_dl.source = 'crm_command' then
    perform 1 from bitrix_sync.business_alerts a
     where a.id = (select c.alert_id from bitrix_sync.crm_commands c where c.id = v_dl.command_id)
       for update;
  end if;
  v_refusal := bitrix_sync._requeue_refusal(v_dl);
  if v_refusal ->> 'code' = 'BS042' then
    raise exception 'technical dead letter % cannot be requeued: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS042', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  elsif v_refusal is not null then
    raise exception 'technical dead letter % cannot be requeued yet: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS043', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  end if;
  begin
    v_target := bitrix_sync._requeue_target(v_dl);
  exception when unique_violation then
    -- A new intent or workflow of the user arrived between the check and the insert.
    raise exception 'technical dead letter % cannot be requeued: the user has new work under way', p_id
      using errcode = 'BS043', hint = 'Wait until it finishes (bitrix_sync.status_workflows), then look again with list_dead_letters().';
  end;
  return query select * from bitrix_sync._resolve_dead_letters(
    bitrix_sync._covered_dead_letters(v_dl), 'requeued', p_operator, p_reason, v_target);
end $$;
comment on function bitrix_sync.requeue_dead_letter(bigint, text, text) is
  'Admin (§9): starts a new, fenced attempt of what an open technical dead letter gave up on, through the normal state machine (a new intent or inbox row, the failed workflow from its first step, or the alert''s mirror), with a retry horizon counted from now; marks it (and the open entries the same attempt answers) resolved as requeued with operator and reason. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved, BS042 nothing to run again, BS043 something else of the same user or alert is running.';

-- Privileges: sql/privileges.sql (the admin role executes list, acknowledge and requeue; the
-- internal helpers run inside them as their owner and are granted to nobody).
-- <<< sql/dead_letters.sql
-- >>> sql/retention.sql (included)
-- Retention (issue 11; docs/admin.md): finished rows are deleted after retention.*_days, in batches of
-- at most retention.batch_size rows, each batch one short transaction of its own. The hourly
-- `retention` task (tasks/retention.ts, src/maintenance/retention.ts) calls delete_retention_batch()
-- per table until a batch deletes nothing; an admin can call the same function from psql.
--
-- Locks: a batch picks its rows with FOR UPDATE SKIP LOCKED (a row someone holds is left for the
-- next run, never waited for) and runs with lock_timeout 200ms, so it never queues behind, or
-- holds up, the App's writes to han_app.sync_queue: the App inserts new rows and updates active
-- ones; a batch touches only finished ones, and only their row locks, for milliseconds.
--
-- Kept whatever their age (audit): mappings and their history, rebind requests, settings versions,
-- business alerts, the cutover, technical dead letters; and every row an open dead letter or an
-- unfinished workflow still refers to, a user's newest workflow (it lets an equal intent be
-- skipped), the workflows of mappings and rebind requests, and the commands of an alert whose item
-- is not known yet (they decide whether an add may have landed).

create or replace function bitrix_sync._retention_cutoff(p_key text) returns timestamptz
language sql stable as $$
  select now() - make_interval(days => (bitrix_sync._active_setting(p_key) #>> '{}')::integer)
$$;
comment on function bitrix_sync._retention_cutoff(text) is
  'Internal: now minus the retention.*_days setting p_key: rows finished before it may be deleted.';

create or replace function bitrix_sync.delete_retention_batch(p_table text)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set lock_timeout = '200ms' as $$
declare
  v_limit integer := (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_ids bigint[];
  v_uuids uuid[];
  v_count integer;
begin
  case p_table
    when 'webhooks' then
      -- Processed events (coalesced ones are processed with the event that covered them), and
      -- dead-lettered ones no open dead letter refers to any more. An event others were coalesced
      -- into goes after them (the foreign key), so a batch never grows past its size: a flood of
      -- one Contact is thousands of events coalesced into a few.
      select array_agg(w.id) into v_ids
        from (select w.id from bitrix_sync.webhook_inbox w
               where w.status = 'processed'
                 and w.processed_at < bitrix_sync._retention_cutoff('retention.webhooks_days')
                 and not exists (select 1 from bitrix_sync.webhook_inbox c where c.coalesced_into = w.id)
               order by w.processed_at
               limit v_limit
               for update skip locked) w;
      if coalesce(cardinality(v_ids), 0) < v_limit then
        select coalesce(v_ids, '{}') || coalesce(array_agg(w.id), '{}') into v_ids
          from (select w.id from bitrix_sync.webhook_inbox w
                 where w.status = 'dead_letter'
                   and w.status_at < bitrix_sync._retention_cutoff('retention.webhooks_days')
                   and not exists (select 1 from bitrix_sync.webhook_inbox c where c.coalesced_into = w.id)
                   and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                    where d.resolved_at is null and d.source = 'webhook' and d.source_id = w.id::text)
                 order by w.id
                 limit v_limit - coalesce(cardinality(v_ids), 0)
                 for update skip locked) w;
      end if;
      delete from bitrix_sync.webhook_inbox w where w.id = any(v_ids);
    when 'commands' then
      select array_agg(c.id) into v_ids
        from (select c.id from bitrix_sync.crm_commands c
                left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
                left join bitrix_sync.business_alerts a on a.id = c.alert_id
               where c.completed_at < bitrix_sync._retention_cutoff('retention.commands_days')
                 and c.status in ('succeeded', 'dead_letter')
                 and (c.workflow_id is null or w.state in ('succeeded', 'failed', 'cancelled'))
                 and (c.alert_id is null or a.item_id is not null)
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null
                                    and (d.command_id = c.id or d.workflow_id = c.workflow_id))
               order by c.completed_at
               limit v_limit
               for update of c skip locked) c;
      delete from bitrix_sync.crm_commands c where c.id = any(v_ids);
    when 'workflows' then
      select array_agg(w.id) into v_uuids
        from (select w.id from bitrix_sync.workflow_instances w
               where w.state in ('succeeded', 'failed', 'cancelled')
                 and w.finished_at < bitrix_sync._retention_cutoff('retention.workflows_days')
                 and not exists (select 1 from bitrix_sync.crm_commands c where c.workflow_id = w.id)
                 and exists (select 1 from bitrix_sync.workflow_instances n
                                  where n.user_id = w.user_id and n.created_at > w.created_at)
                 and not exists (select 1 from bitrix_sync.rebind_requests r where r.workflow_id = w.id)
                 and not exists (select 1 from bitrix_sync.entity_external_mapping m where m.workflow_id = w.id)
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null and d.workflow_id = w.id)
               order by w.finished_at
               limit v_limit
               for update skip locked) w;
      delete from bitrix_sync.workflow_instances w where w.id = any(v_uuids);
    when 'queue' then
      select array_agg(q.id) into v_uuids
        from (select q.id from han_app.sync_queue q
               where q.status in ('processed', 'cancelled', 'dead_letter')
                 and q.completed_at < bitrix_sync._retention_cutoff('retention.queue_days')
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null and d.source = 'sync_queue' and d.source_id = q.id::text)
                 and q.id not in (select w.source_task_id from bitrix_sync.workflow_instances w
                                   where w.state not in ('succeeded', 'failed', 'cancelled')
                                     and w.source_task_id is not null)
               limit v_limit
               for update skip locked) q;
      delete from han_app.sync_queue q where q.id = any(v_uuids);
    else
      raise exception 'retention knows the tables webhooks, commands, workflows and queue, not %', p_table
        using errcode = 'BS004', hint = 'Example: select bitrix_sync.delete_retention_batch(''webhooks'');';
  end case;
  get diagnostics v_count = row_count;
  return v_count;
end $$;
comment on function bitrix_sync.delete_retention_batch(text) is
  'Deletes one batch (at most retention.batch_size rows) of finished rows of one table past its retention.*_days: webhooks (processed; dead-lettered with no open dead letter; an event others were coalesced into after them), commands (succeeded or dead-lettered, of finished workflows or of alerts with an item, with no open dead letter), workflows (finished, commands gone, not the user''s newest, not referred to by a mapping, a rebind request or an open dead letter) or queue (processed, cancelled or dead-lettered intents no open dead letter or unfinished workflow refers to). Rows are picked FOR UPDATE SKIP LOCKED under lock_timeout 200ms. Returns rows deleted; call again until it returns 0.';

create or replace function bitrix_sync.retention_preview()
returns table (table_name text, deletable bigint, oldest_finished_at timestamptz, kept_days integer)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select 'webhooks', count(*), min(coalesce(w.processed_at, w.status_at)),
         (bitrix_sync._active_setting('retention.webhooks_days') #>> '{}')::integer
    from bitrix_sync.webhook_inbox w
   where (w.status = 'processed' and w.processed_at < bitrix_sync._retention_cutoff('retention.webhooks_days'))
      or (w.status = 'dead_letter' and w.status_at < bitrix_sync._retention_cutoff('retention.webhooks_days')
          and not exists (select 1 from bitrix_sync.technical_dead_letters d
                           where d.resolved_at is null and d.source = 'webhook' and d.source_id = w.id::text))
  union all
  select 'commands', count(*), min(c.completed_at),
         (bitrix_sync._active_setting('retention.commands_days') #>> '{}')::integer
    from bitrix_sync.crm_commands c
    left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
    left join bitrix_sync.business_alerts a on a.id = c.alert_id
   where c.completed_at < bitrix_sync._retention_cutoff('retention.commands_days')
     and c.status in ('succeeded', 'dead_letter')
     and (c.workflow_id is null or w.state in ('succeeded', 'failed', 'cancelled'))
     and (c.alert_id is null or a.item_id is not null)
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and (d.command_id = c.id or d.workflow_id = c.workflow_id))
  union all
  -- Workflows whose commands go in the same run count too: they are deleted right after them.
  select 'workflows', count(*), min(w.finished_at),
         (bitrix_sync._active_setting('retention.workflows_days') #>> '{}')::integer
    from bitrix_sync.workflow_instances w
   where w.state in ('succeeded', 'failed', 'cancelled')
     and w.finished_at < bitrix_sync._retention_cutoff('retention.workflows_days')
     and not exists (select 1 from bitrix_sync.crm_commands c
                      where c.workflow_id = w.id
                        and (c.completed_at is null
                             or c.completed_at >= bitrix_sync._retention_cutoff('retention.commands_days')
                             or exists (select 1 from bitrix_sync.technical_dead_letters d
                                         where d.resolved_at is null and d.command_id = c.id)))
     and exists (select 1 from bitrix_sync.workflow_instances n
                      where n.user_id = w.user_id and n.created_at > w.created_at)
     and not exists (select 1 from bitrix_sync.rebind_requests r where r.workflow_id = w.id)
     and not exists (select 1 from bitrix_sync.entity_external_mapping m where m.workflow_id = w.id)
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and d.workflow_id = w.id)
  union all
  select 'queue', count(*), min(q.completed_at),
         (bitrix_sync._active_setting('retention.queue_days') #>> '{}')::integer
    from han_app.sync_queue q
   where q.status in ('processed', 'cancelled', 'dead_letter')
     and q.completed_at < bitrix_sync._retention_cutoff('retention.queue_days')
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and d.source = 'sync_queue' and d.source_id = q.id::text)
     and q.id not in (select w.source_task_id from bitrix_sync.workflow_instances w
                       where w.state not in ('succeeded', 'failed', 'cancelled') and w.source_task_id is not null)
$$;
comment on function bitrix_sync.retention_preview() is
  'Admin: what the next retention run would delete, per table (webhooks, commands, workflows, queue): how many rows, the oldest finish time among them and the retention.*_days in force. Reads only; counts the history, so run it by hand, not from a scrape.';

-- Privileges: sql/privileges.sql.
-- <<< sql/retention.sql
-- >>> sql/metrics.sql (included)
-- Metrics (§15): what /metrics reads from the database in one call at scrape time, and the counting
-- of state transitions where they happen, in the transaction that makes them. Counts, ages and
-- low-cardinality labels only (types, states, receivers, sources, safe codes): never a user or
-- Contact ID, a phone, an e-mail or a fingerprint. src/observability/metrics.ts turns the rows into
-- Prometheus families; docs/observability.md lists them.
--
-- Why the transition counters live here: most transitions happen inside SQL (claims, the wake-up of
-- a workflow when its command completes, coalescing, dead-lettering), where no lane sees the old
-- state. An AFTER trigger appends one row per transition to bitrix_sync.metric_events; nothing is
-- updated in place, so two writers never wait on each other and a rolled-back transition is never
-- counted. metrics_snapshot() folds the appended rows into bitrix_sync.metric_event_totals, so the
-- counters survive restarts and every replica reports the same totals.

create or replace function bitrix_sync.tg_workflow_instances__count_transition() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('workflow', new.workflow_type, old.state, new.state);
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__count_transition() is
  'AFTER UPDATE OF state trigger: appends one workflow transition (type, from, to) to metric_events for bitrix_sync_workflow_transitions_total. Security definer: whoever moves the workflow, nobody needs rights on the table.';

drop trigger if exists _900_count_transition on bitrix_sync.workflow_instances;
create trigger _900_count_transition after update of state on bitrix_sync.workflow_instances
  for each row when (old.state is distinct from new.state)
  execute function bitrix_sync.tg_workflow_instances__count_transition();
comment on trigger _900_count_transition on bitrix_sync.workflow_instances is
  'Counts each committed workflow transition for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.tg_crm_commands__count_transition() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('command', new.command_type, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_crm_commands__count_transition() is
  'AFTER UPDATE OF status trigger: appends one command transition (type, from, to) to metric_events for bitrix_sync_command_transitions_total.';

drop trigger if exists _900_count_transition on bitrix_sync.crm_commands;
create trigger _900_count_transition after update of status on bitrix_sync.crm_commands
  for each row when (old.status is distinct from new.status)
  execute function bitrix_sync.tg_crm_commands__count_transition();
comment on trigger _900_count_transition on bitrix_sync.crm_commands is
  'Counts each committed command transition for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.tg_webhook_inbox__count_coalesced() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('webhook', new.receiver, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_webhook_inbox__count_coalesced() is
  'AFTER UPDATE OF status trigger: appends one event coalesced into another (claim_webhooks) to metric_events for bitrix_sync_webhook_coalesced_total.';

drop trigger if exists _900_count_coalesced on bitrix_sync.webhook_inbox;
create trigger _900_count_coalesced after update of status on bitrix_sync.webhook_inbox
  for each row when (new.status = 'coalesced' and old.status is distinct from new.status)
  execute function bitrix_sync.tg_webhook_inbox__count_coalesced();
comment on trigger _900_count_coalesced on bitrix_sync.webhook_inbox is
  'Counts webhook events covered by another event''s read (received -> coalesced) for /metrics.';

create or replace function bitrix_sync.tg_technical_dead_letters__count() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('dead_letter', new.source, '', 'dead_letter');
  return null;
end $$;
comment on function bitrix_sync.tg_technical_dead_letters__count() is
  'AFTER INSERT trigger: appends one new technical dead letter (by source) to metric_events for bitrix_sync_dead_letters_total.';

drop trigger if exists _900_count_dead_letter on bitrix_sync.technical_dead_letters;
create trigger _900_count_dead_letter after insert on bitrix_sync.technical_dead_letters
  for each row execute function bitrix_sync.tg_technical_dead_letters__count();
comment on trigger _900_count_dead_letter on bitrix_sync.technical_dead_letters is
  'Counts each new technical dead letter for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.metrics_snapshot(p_bucket text default null, p_check_mappings boolean default false)
returns table (family text, labels jsonb, value double precision)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_burst double precision := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::double precision;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
begin
  -- Fold what the triggers appended since the last scrape. One scrape folds at a time; another
  -- scrape meanwhile reads the totals plus the rows not folded yet, which gives the same sums.
  if pg_try_advisory_xact_lock(hashtext('bitrix_sync.metric_events')) then
    with moved as (
      delete from bitrix_sync.metric_events e returning e.machine, e.kind, e.from_state, e.to_state
    )
    insert into bitrix_sync.metric_event_totals as t (machine, kind, from_state, to_state, count)
    select m.machine, m.kind, m.from_state, m.to_state, count(*) from moved m group by 1, 2, 3, 4
    on conflict (machine, kind, from_state, to_state) do update set count = t.count + excluded.count;
  end if;

  return query
  -- Live states only: each filter reaches the status view's scan (its grouping column), so no
  -- finished row is read.
  with queue as (
    select q.status, q.count, q.oldest_age_sec from bitrix_sync.status_queue q
     where q.status in ('pending', 'leased', 'retry_wait')
  ), queue_all as (
    -- Every live status always present (0 when empty), so "older than" alerts have a series.
    select s.status, coalesce(q.count, 0) as count, coalesce(q.oldest_age_sec, 0) as oldest_age_sec
      from unnest(array['pending', 'leased', 'retry_wait']) s(status) left join queue q on q.status = s.status
  ), workflows as (
    select w.workflow_type, w.state, w.count, w.oldest_age_sec from bitrix_sync.status_workflows w
     where w.state in ('created', 'running', 'waiting_crm', 'waiting_retry', 'waiting_manual')
  ), commands as (
    select c.command_type, c.status, c.count, c.oldest_age_sec from bitrix_sync.status_commands c
     where c.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')
  ), inbox as (
    select h.receiver, h.status, h.count, h.oldest_age_sec from bitrix_sync.status_webhooks h
     where h.status in ('received', 'coalesced', 'processing', 'retry_wait')
  ), dead as (
    select d.source, d.operation, d.error_code, d.count, d.oldest_age_sec from bitrix_sync.status_dead_letters d
  ), alerts as (
    select a.alert_type, a.severity, a.open_count, a.sla_overdue from bitrix_sync.status_alerts a
  ), mirror as (
    -- Alerts whose smart-process item is behind; both statuses always present (0 when none).
    select s.status, coalesce(m.count, 0) as count
      from unnest(array['pending', 'failed']) s(status)
      left join bitrix_sync.status_alert_mirror m on m.mirror_status = s.status
  ), events as (
    -- The folded totals plus whatever a concurrent scrape has not folded yet.
    select e.machine, e.kind, e.from_state, e.to_state, sum(e.n) as n
      from (select t.machine, t.kind, t.from_state, t.to_state, t.count as n from bitrix_sync.metric_event_totals t
            union all
            select p.machine, p.kind, p.from_state, p.to_state, 1 from bitrix_sync.metric_events p) e
     group by e.machine, e.kind, e.from_state, e.to_state
  )
  select 'bitrix_sync_queue_depth', jsonb_build_object('status', q.status), q.count::float8 from queue_all q
  union all
  select 'bitrix_sync_queue_oldest_age_seconds', jsonb_build_object('status', q.status), q.oldest_age_sec::float8
    from queue_all q
  union all
  select 'bitrix_sync_workflows_active', jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state),
         w.count::float8 from workflows w
  union all
  select 'bitrix_sync_workflows_oldest_age_seconds',
         jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state), w.oldest_age_sec::float8 from workflows w
  union all
  select 'bitrix_sync_crm_commands', jsonb_build_object('command_type', c.command_type, 'status', c.status),
         c.count::float8 from commands c
  union all
  select 'bitrix_sync_crm_commands_oldest_age_seconds',
         jsonb_build_object('command_type', c.command_type, 'status', c.status), c.oldest_age_sec::float8 from commands c
  union all
  select 'bitrix_sync_webhook_inbox', jsonb_build_object('receiver', h.receiver, 'status', h.status), h.count::float8
    from inbox h
  union all
  select 'bitrix_sync_webhook_inbox_oldest_age_seconds', jsonb_build_object('receiver', h.receiver, 'status', h.status),
         h.oldest_age_sec::float8 from inbox h
  union all
  select 'bitrix_sync_dead_letters_open',
         jsonb_build_object('source', d.source, 'operation', d.operation, 'code', d.error_code), d.count::float8 from dead d
  union all
  select 'bitrix_sync_dead_letters_oldest_age_seconds', jsonb_build_object('source', d.source),
         max(d.oldest_age_sec)::float8 from dead d group by d.source
  union all
  select 'bitrix_sync_business_alerts_open', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.open_count::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_sla_overdue', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.sla_overdue::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_unmirrored', jsonb_build_object('mirror_status', m.status), m.count::float8
    from mirror m
  union all
  -- A pass over the active mappings: the service asks for it at most once a minute.
  select 'bitrix_sync_mapping_invariant_violations', '{}'::jsonb, count(*)::float8
    from bitrix_sync.entity_external_mapping m
    join han_app.user_identity u on u.id = m.entity_id
   where p_check_mappings and m.status = 'active' and u.record_status <> 'active'
  having p_check_mappings
  union all
  select 'bitrix_sync_reconciliation_cursor_lag_seconds', jsonb_build_object('job_type', r.job_type),
         greatest(0, extract(epoch from now() - r.watermark))::float8
    from bitrix_sync.reconciliation_cursors r
   where r.watermark is not null
  union all
  select l.family, '{}'::jsonb, l.value
    from bitrix_sync.crm_rate_buckets b
   cross join lateral (values
     -- Refilled to now at the stored rate factor, as the next acquire_crm_request() would see it.
     ('bitrix_sync_limiter_tokens',
      least(v_burst, b.tokens + v_refill * b.rate_factor * greatest(0, extract(epoch from clock_timestamp() - b.refilled_at)))),
     ('bitrix_sync_limiter_rate_factor', b.rate_factor),
     ('bitrix_sync_limiter_throttled_seconds',
      greatest(0, coalesce(extract(epoch from b.throttled_until - clock_timestamp()), 0))::float8),
     ('bitrix_sync_limiter_in_flight',
      (select count(*) from bitrix_sync.crm_inflight_slots s
        where s.bucket = b.bucket and s.expires_at > clock_timestamp())::float8),
     ('bitrix_sync_limiter_blocked_methods',
      (select count(*) from bitrix_sync.crm_method_blocks m
        where m.bucket = b.bucket and m.blocked_until > clock_timestamp())::float8)
   ) l(family, value)
   where b.bucket = p_bucket
  union all
  select 'bitrix_sync_workflow_transitions_total',
         jsonb_build_object('workflow_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'workflow'
  union all
  select 'bitrix_sync_command_transitions_total',
         jsonb_build_object('command_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'command'
  union all
  -- Present from the start for every receiver and source (0 before the first event), so increase()
  -- sees the first one.
  select 'bitrix_sync_webhook_coalesced_total', jsonb_build_object('receiver', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'webhook' and e.kind = k.kind), 0)::float8
    from unnest(array['contact', 'alert']) k(kind)
  union all
  select 'bitrix_sync_dead_letters_total', jsonb_build_object('source', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'dead_letter' and e.kind = k.kind), 0)::float8
    from unnest(array['sync_queue', 'workflow', 'crm_command', 'webhook']) k(kind);
end $$;
comment on function bitrix_sync.metrics_snapshot(text, boolean) is
  'Every database-derived Prometheus sample for GET /metrics in one call: queue, workflow, command and inbox depths and oldest ages (live states), open dead letters, business alerts, reconciliation cursor lag, the limiter bucket p_bucket, and the transition counters (folded from metric_events first). p_check_mappings adds the mapping invariant count (a pass over the active mappings). Rows: (family, labels, value); labels are low-cardinality only.';
-- <<< sql/metrics.sql
-- >>> sql/privileges.sql (included)
-- The privilege catalogue (§13, DESIGN.md "Roles"; issue 10): for every schema, table, view,
-- sequence and function of the project, what each of the three roles may do, written out, "nothing"
-- included. sql/grants.sql revokes everything and grants exactly this list; docs/security.md is
-- rendered from it; test/integration/privileges.test.ts checks that the database's ACLs equal it and
-- that no object of bitrix_sync (or the project's objects of han_app) lacks a decision.
--
-- Adding a function, table, view or sequence: add one row here (runtime, admin, app; '{}' is an
-- explicit "nothing") and include sql/privileges.sql and sql/grants.sql in the migration.
--
-- A privilege is written as GRANT takes it: 'SELECT', 'EXECUTE', 'USAGE', or with columns,
-- 'UPDATE (status, locked_by)'. Objects are schema-qualified; a function by its signature as
-- regprocedure prints it (types, no parameter names).
--
-- Who is who: bitrix_sync_user runs the service (the functions it calls and their internal
-- helpers; it writes its tables only in the columns those functions write, so an insert can never
-- name a state and identity or audit columns are out of reach; sql/row_guards.sql holds the same
-- rules for every writer). bitrix_sync_admin is an operator with psql: the audited admin functions
-- (security definer, so no table rights), the status views and the settings it changes.
-- han_app_user is the App: its identity and profile tables; sync_queue rows appear through the
-- security definer trigger.

create or replace view bitrix_sync.role_privileges as
with decisions (object_type, object_name, runtime, admin, app, note) as (values
  -- schemas
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], 'The project''s schema; the App has no business in it.'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], 'The App''s schema; the admin reaches the queue only through status_queue.'),

  -- App tables (§13: the runtime reads the columns it needs and writes only the CRM-master fields)
  ('table', 'han_app.user_identity', array['SELECT (id, phone_number, record_status, created_at, updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'Identity is App-master; the runtime reads it at send time.'),
  ('table', 'han_app.client_profile',
   array['SELECT (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)',
         'UPDATE (full_name, citizenship, email, source_updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'The runtime writes only the CRM-master fields (§3.1), through apply_crm_master_fields.'),
  ('table', 'han_app.sync_queue',
   array['SELECT', 'UPDATE (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code, last_error_at, completed_at, cancel_reason, updated_at)'],
   array[]::text[], array['SELECT'],
   'Intents appear through the App''s trigger; the runtime moves them through the lease functions and never inserts one.'),
  ('function', 'han_app.enqueue_contact_sync()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): fires for the App''s writes; nobody calls it.'),

  -- bitrix_sync tables the runtime writes through its functions: only the columns they write
  ('table', 'bitrix_sync.business_alerts',
   array['SELECT',
         'INSERT (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, previous_alert_id, correlation_id)',
         'UPDATE (occurrence_count, last_occurred_at, current_contact_id, selected_contact_id, candidate_contact_ids, details, correlation_id, crm_sync_status, item_id, stage_id, status, closed_at)'],
   array[]::text[], array[]::text[], 'Alerts are raised open and finished by the runtime; the admin sees them through status_alerts.'),
  ('sequence', 'bitrix_sync.business_alert_number_seq', array['USAGE'], array[]::text[], array[]::text[],
   'The default of business_alerts.alert_number, evaluated as the inserting role.'),
  ('table', 'bitrix_sync.contact_snapshots',
   array['SELECT',
         'INSERT (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)',
         'UPDATE (user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)'],
   array[]::text[], array[]::text[], 'Hashes of what the runtime last wrote into or read from each Contact.'),
  ('table', 'bitrix_sync.crm_commands',
   array['SELECT',
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)', 'UPDATE (status, closed_at, close_reason, workflow_id)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions; the user and the Contact of a link never change.'),
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- metrics (sql/metrics.sql): written by security definer triggers, read by metrics_snapshot()
  ('table', 'bitrix_sync.metric_event_totals', array[]::text[], array[]::text[], array[]::text[],
   'Counter totals; only metrics_snapshot() (security definer) folds into and reads them.'),
  ('table', 'bitrix_sync.metric_events', array[]::text[], array[]::text[], array[]::text[],
   'Counted events; appended by the security definer _900 triggers whoever makes the change.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, dead_letter_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
   'Audit of the admin functions (security definer) that write it; the Contact a decision named stays out of the admin''s reading.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),

  -- identity sequences: inserting into an identity column needs no right on its sequence
  ('sequence', 'bitrix_sync.admin_actions_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of admin_actions.'),
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),

  -- views
  ('view', 'bitrix_sync.parked_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Workflows waiting for a person, with their reason and the decisions that apply (docs/admin.md).'),
  ('view', 'bitrix_sync.rebind_request_status', array[]::text[], array['SELECT'], array[]::text[],
   'Rebind requests as an admin follows them (docs/admin.md).'),
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.'),
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).'),
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.'),
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.'),
  ('view', 'bitrix_sync.status_alert_mirror', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14): alerts whose smart-process item is behind (pending, failed); read by /metrics.'),
  ('view', 'bitrix_sync.status_commands', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_dead_letters', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_queue', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_webhooks', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_workflows', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),

  -- admin functions (security definer): cutover, settings, rebind, re-recording a lost webhook
  ('function', 'bitrix_sync.accept_webhook(text,integer,text,inet)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Re-records one robot call by hand (the robot does not retry).'),
  ('function', 'bitrix_sync.activate_settings_version(integer,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.perform_cutover(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The one-time cutover (§17); it also opens the processing gate.'),
  ('function', 'bitrix_sync.propose_settings(jsonb,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind (§5.4).'),
  ('function', 'bitrix_sync.cancel_rebind_request(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind: cancel an open request (docs/admin.md).'),
  ('function', 'bitrix_sync.resume_parked_workflow(uuid,text,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: resume with a decision.'),
  ('function', 'bitrix_sync.cancel_parked_workflow(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: cancel with a reason.'),
  ('function', 'bitrix_sync._parked_decisions(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The decisions a parked reason admits; called by the parked_workflows view with the reader''s rights.'),
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.list_dead_letters(boolean,integer)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: what is open, and what a requeue would do (docs/admin.md).'),
  ('function', 'bitrix_sync.acknowledge_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: resolved without a new attempt, audited.'),
  ('function', 'bitrix_sync.requeue_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: a new attempt through the normal state machine, audited.'),
  ('function', 'bitrix_sync.retention_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Retention: what the next run would delete (reads the history: by hand only).'),
  ('function', 'bitrix_sync.delete_retention_batch(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one batch of finished rows (security definer: nobody holds DELETE on those tables); the hourly task, or an admin now.'),

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),

  ('function', 'bitrix_sync.metrics_snapshot(text,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'GET /metrics (security definer): counts, ages and counters with low-cardinality labels; the admin may run it in psql.'),

  -- runtime functions: the receivers
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement.'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).'),
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.mark_command_uncertain(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.reject_command(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.release_command(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.resolve_command_reconcile(bigint,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.retry_command(bigint,uuid,text,interval,boolean,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.send_commands(bigint[],uuid[],uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  -- runtime functions: the limiter
  ('function', 'bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.blocked_crm_methods(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_operating(text,text[],double precision[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_method_blocked(text,text,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  -- runtime functions: inbox processing, mapping, snapshots, alerts, rebind workflow, reconciliation
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.recover_alert_command(bigint,interval)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Alert mirroring: an unanswered alert command moves on (sql/alert_mirror.sql).'),
  ('function', 'bitrix_sync.alerts_to_look_up(integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: items to look up.'),
  ('function', 'bitrix_sync.issue_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup of an item.'),
  ('function', 'bitrix_sync.resolve_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup''s outcome.'),
  ('function', 'bitrix_sync.fail_alert_lookup(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: a lookup that failed for good.'),
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.apply_crm_master_fields(uuid,text,text,text,text,text,text,text,timestamp with time zone,boolean,timestamp with time zone,timestamp with time zone,text,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots and the CRM-master profile write.'),
  ('function', 'bitrix_sync.mark_contact_snapshot_stale(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_created(text,uuid,text,text,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_phone(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.finish_business_alert(bigint,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirror_failed(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirrored(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.raise_business_alert(text,text,text,uuid,text,text,jsonb,jsonb,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.record_alert_item(bigint,bigint,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.complete_rebind(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync._close_rebind_request(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Security definer, called by the trigger that closes the request of a finished contact.rebind workflow (the runtime''s transitions fire it).'),
  ('function', 'bitrix_sync.start_rebind_request(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync.claim_reconciliation_cursor(text,interval,boolean,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation (gated by the cutover).'),
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.finish_reconciliation_run(text,uuid,integer,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),

  -- internal helpers the runtime's (security invoker) functions call: a nested call is checked
  -- against the calling role too
  ('function', 'bitrix_sync._check_bitrix_error(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._check_code(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: refuses raw text as an error code.'),
  ('function', 'bitrix_sync._check_limiter_name(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter.'),
  ('function', 'bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the queue functions.'),
  ('function', 'bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the inbox functions.'),
  ('function', 'bitrix_sync._held_workflow(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the workflow functions.'),
  ('function', 'bitrix_sync._is_write_command(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of claim_commands.'),
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.'),
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.'),
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.'),
  ('function', 'bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of schedule_workflow_retry: the horizon counts from a requeue.'),
  ('function', 'bitrix_sync._alert_add_unsafe(bigint)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the alert mirror (runAlertSync asks it before an add).'),

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._open_dead_letter(bigint)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._resolve_dead_letters(bigint[],text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._retention_cutoff(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.'),
  ('function', 'bitrix_sync._record_admin_action(text,uuid,uuid,text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._rebind_crm_outcome(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of _close_rebind_request and cancel_rebind_request.'),
  ('function', 'bitrix_sync.tg_workflow_instances__close_rebind_request()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__start_held_intent()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync._normalise_settings(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._rebind_request_of(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the rebind workflow functions.'),
  ('function', 'bitrix_sync._resolve_conflict_alerts(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of complete_rebind.'),
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.'),
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_crm_commands__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_technical_dead_letters__count()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_webhook_inbox__count_coalesced()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_workflow_instances__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_settings_versions__freeze()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
)
select d.object_type, d.object_name, r.role, r.privileges, d.note
  from decisions d
  cross join lateral (values ('bitrix_sync_user', d.runtime), ('bitrix_sync_admin', d.admin), ('han_app_user', d.app))
    as r(role, privileges);
comment on view bitrix_sync.role_privileges is
  'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why. sql/grants.sql applies exactly this; docs/security.md is rendered from it.';

-- What the database actually grants, in the catalogue's terms, and where the two differ. The
-- project's objects are all of schema bitrix_sync and the objects of han_app the catalogue names
-- (in production han_app holds the App's other tables, which are none of this project's business).
create or replace view bitrix_sync.role_privilege_drift as
with objects as (
  select 'schema'::text as object_type, n.nspname::text as object_name, n.nspowner as owner, n.nspacl as acl,
         null::oid as relid, 'n'::"char" as acl_kind
    from pg_namespace n where n.nspname in ('bitrix_sync', 'han_app')
  union all
  select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'view' else 'table' end,
         format('%I.%I', n.nspname, c.relname), c.relowner, c.relacl, c.oid,
         case c.relkind when 'S' then 's'::"char" else 'r'::"char" end
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
  union all
  select 'function', p.oid::regprocedure::text, p.proowner, p.proacl, null, 'f'::"char"
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('bitrix_sync', 'han_app')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
), catalogue as (
  select rp.object_type, rp.object_name, rp.role, rp.privileges from bitrix_sync.role_privileges rp
), project_objects as (
  select o.* from objects o
   where o.object_name = 'bitrix_sync' or o.object_name like 'bitrix\_sync.%'
      or exists (select 1 from catalogue c where c.object_type = o.object_type and c.object_name = o.object_name)
), roles (role) as (
  values ('bitrix_sync_user'), ('bitrix_sync_admin'), ('han_app_user')
), actual as (
  -- object-wide privileges ...
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC') as role, a.privilege_type as privilege,
         null::text as column_name
    from project_objects o
    cross join lateral aclexplode(coalesce(o.acl, acldefault(o.acl_kind, o.owner))) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
  union all
  -- ... and column privileges
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname::text
    from project_objects o
    join pg_attribute att on att.attrelid = o.relid and att.attnum > 0 and not att.attisdropped and att.attacl is not null
    cross join lateral aclexplode(att.attacl) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
), expected as (
  select c.object_type, c.object_name, c.role, m[1] as privilege, btrim(col) as column_name
    from catalogue c
    cross join lateral unnest(c.privileges) spec
    cross join lateral regexp_match(spec, '^([A-Z]+)\s*(?:\((.*)\))?$') m
    cross join lateral unnest(coalesce(string_to_array(m[2], ','), array[null]::text[])) col
)
select e.object_type, e.object_name, e.role, e.privilege, e.column_name, 'missing'::text as problem
  from expected e
 where exists (select 1 from project_objects o where o.object_type = e.object_type and o.object_name = e.object_name)
   and not exists (select 1 from actual a where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                            and a.column_name is not distinct from e.column_name)
union all
select a.object_type, a.object_name, a.role, a.privilege, a.column_name, 'extra'
  from actual a
 where not exists (select 1 from expected e where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                              and a.column_name is not distinct from e.column_name)
   -- PUBLIC is checked only on what the project owns (it never grants PUBLIC anything); the App's
   -- identity and profile tables and its schema keep whatever the App gives everyone.
   and not (a.role = 'PUBLIC' and a.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
union all
select o.object_type, o.object_name, r.role, null, null, 'undecided'
  from project_objects o cross join roles r
 where not exists (select 1 from catalogue c where (c.object_type, c.object_name, c.role) = (o.object_type, o.object_name, r.role))
union all
select distinct c.object_type, c.object_name, null, null, null, 'unknown_object'
  from catalogue c
 where not exists (select 1 from objects o where o.object_type = c.object_type and o.object_name = c.object_name);
comment on view bitrix_sync.role_privilege_drift is
  'Differences between the database''s ACLs and bitrix_sync.role_privileges for the three roles and PUBLIC: missing and extra privileges (column privileges by column), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object). Empty when they agree.';
-- <<< sql/privileges.sql
-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md): everything is revoked, then exactly what the catalogue
-- bitrix_sync.role_privileges (sql/privileges.sql) lists is granted. Re-runnable; include it (after
-- sql/privileges.sql) in every migration that adds or changes an object of the project.
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

do $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A catalogue row naming no object, or an object of the project without a decision for a role,
  -- stops the migration: the next step would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Add a row per new object to sql/privileges.sql (runtime, admin, app; ''{}'' for nothing) and drop rows of removed objects, then include sql/privileges.sql and sql/grants.sql in the migration.';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and tables keep whatever the App grants its other roles and everyone.
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user', v_kind, v_row.object_name);
  end loop;
  revoke all on han_app.sync_queue from public;
  revoke all on function han_app.enqueue_contact_sync() from public;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;
end $$;
-- <<< sql/grants.sql
