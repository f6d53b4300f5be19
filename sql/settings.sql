-- Hot settings (§12.3): a typed catalogue, versions with validation status and audit, activation of
-- validated versions only, rollback, and a NOTIFY so workers reload.

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.entity_type_id', 'integer', null, 128, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, null, false, 'Smart-process field names (ufCrm<type>_...) by what they hold: alert_number, fingerprint, type, severity, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, occurrence_count, first_occurred_at, last_occurred_at, previous_alert_number, correlation_id. alert_number (or fingerprint) is what an unanswered alert.add is looked up by.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, false, 'Resolution SLA of an alert in calendar hours from its first occurrence (nights, weekends and holidays count); 24 by default.'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, true, 'Terminal stage ID: closed without resolution.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, true, 'Stage ID: in progress.'),
  ('alerts.stage_new', 'text', null, null, null, null, true, 'Stage ID for new alerts.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, true, 'Terminal stage ID: resolved.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, false, 'Rows claimed from a queue per round trip.'),
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, false, 'Lease length for queue rows, workflows, commands and webhooks.'),
  ('limiter.burst', 'integer', '5', 1, 250, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).'),
  ('reconcile.contacts_interval_sec', 'integer', '900', 60, 86400, null, false, 'Incremental Contact reconciliation interval (§10.2: 15 min).'),
  ('reconcile.lease_sec', 'integer', '600', 60, 86400, null, false, 'A reconciliation run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('reconcile.opened_filter', 'enum', '"Y"', null, null, '["Y", "N", "1", "0"]', false, 'Value sent for the opened filter of crm.item.list; the reference documents Y/N for system booleans.'),
  ('reconcile.overlap_sec', 'integer', '120', 0, 3600, null, false, 'Overlap re-read below the watermark.'),
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, false, 'Ops alert when recovered-without-webhook / changed exceeds this share.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, false, 'Ops alert when a run recovers at least this many Contacts without a webhook and more than twice the baseline.'),
  ('retention.batch_size', 'integer', '500', 10, 5000, null, false, 'Rows deleted per retention transaction; each batch is its own short transaction.'),
  ('retention.commands_days', 'integer', '30', 1, 3650, null, false, 'Finished CRM commands (succeeded, dead-lettered) are deleted this many days after they finished; at most retention.workflows_days.'),
  ('retention.enabled', 'boolean', 'true', null, null, null, false, 'Whether the hourly retention task deletes finished rows.'),
  ('retention.queue_days', 'integer', '30', 1, 3650, null, false, 'Finished han_app.sync_queue rows (processed, cancelled, dead-lettered) are deleted this many days after they finished.'),
  ('retention.run_budget_sec', 'integer', '60', 1, 3000, null, false, 'A retention run stops starting new batches after this long; the next run goes on.'),
  ('retention.webhooks_days', 'integer', '7', 1, 3650, null, false, 'Processed (and coalesced) webhook inbox rows are deleted this many days after they were processed.'),
  ('retention.workflows_days', 'integer', '90', 1, 3650, null, false, 'Finished workflows are deleted this many days after they finished, once their commands are gone.'),
  ('retry.base_ms', 'integer', '1000', 10, 600000, null, false, 'Backoff base (full jitter, §9).'),
  ('retry.horizon_sec', 'integer', '86400', 60, 604800, null, false, 'Retry horizon from the first attempt (§9: 24 h).'),
  ('retry.max_ms', 'integer', '300000', 100, 86400000, null, false, 'Backoff cap.'),
  ('worker.poll_interval_ms', 'integer', '2000', 100, 5000, null, false, 'Fallback poll when no NOTIFY arrives (§8: at most 5 s).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, nullable = excluded.nullable,
      description = excluded.description;

create or replace function bitrix_sync._settings_errors(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_def bitrix_sync.settings;
  v_val jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_key text;
  v_num numeric;
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
        if v_def.value_type = 'integer' and v_num <> trunc(v_num) then
          v_errors := v_errors || to_jsonb(format('%s: must be a whole number', v_def.key));
        end if;
        if v_def.min_value is not null and v_num < v_def.min_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at least %s', v_def.key, v_def.min_value));
        end if;
        if v_def.max_value is not null and v_num > v_def.max_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s', v_def.key, v_def.max_value));
        end if;
      when 'text' then
        if jsonb_typeof(v_val) <> 'string' or length(v_val #>> '{}') = 0 then
          v_errors := v_errors || to_jsonb(format('%s: must be a non-empty string', v_def.key));
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
        end if;
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
  -- alerts.fields: known keys only, each naming a smart-process user field; a typo would leave a
  -- field empty in every item, or leave an unanswered alert.add without a way to look it up.
  if jsonb_typeof(p_values -> 'alerts.fields') = 'object' then
    for v_key in select k from jsonb_object_keys(p_values -> 'alerts.fields') k order by k loop
      if v_key not in ('alert_number', 'fingerprint', 'type', 'severity', 'user_id', 'current_contact_id',
                       'selected_contact_id', 'candidate_contact_ids', 'details', 'occurrence_count',
                       'first_occurred_at', 'last_occurred_at', 'previous_alert_number', 'correlation_id') then
        v_errors := v_errors || to_jsonb(format('alerts.fields: unknown key %s', v_key));
      elsif jsonb_typeof(p_values -> 'alerts.fields' -> v_key) <> 'string'
            or (p_values -> 'alerts.fields' ->> v_key) !~ '^ufCrm[0-9]*_[A-Za-z0-9_]{1,60}$' then
        v_errors := v_errors || to_jsonb(format('alerts.fields: %s must be a smart-process field name like ufCrm14_1700000000', v_key));
      end if;
    end loop;
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;
comment on function bitrix_sync._settings_errors(jsonb) is
  'Validation messages for a complete settings object against the catalogue (types, bounds, allowed values, cross-field rules); empty array when valid.';

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
  values (coalesce(v_base.settings_values, '{}'::jsonb) || p_changes, v_base.version, p_note, btrim(p_actor))
  returning version into v_version;
  return v_version;
end $$;
comment on function bitrix_sync.propose_settings(jsonb, text, text) is
  'Creates a draft version: the active values with p_changes applied. Validate, then activate it.';

create or replace function bitrix_sync.validate_settings_version(p_version integer)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
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
  v_errors := bitrix_sync._settings_errors(v_row.settings_values);
  update bitrix_sync.settings_versions
     set status = case when jsonb_array_length(v_errors) = 0 then 'validated' else 'rejected' end,
         validation_errors = case when jsonb_array_length(v_errors) = 0 then null else v_errors end,
         validated_at = now()
   where version = p_version;
  return v_errors;
end $$;
comment on function bitrix_sync.validate_settings_version(integer) is
  'draft -> validated, or -> rejected with the reasons (returned and stored). A rejected version can never be activated.';

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
