--! Previous: sha1:3b671ef44515fcb992a3f4de65f3da5657dee106
--! Hash: sha1:bca47a4d670194c5e702d1f46da8912f4e04be7b
--! Message: health-alerts

-- What tells an operator that something failed silently (docs/runbook.md, docs/observability.md):
--
-- - reconciliation_cursors.failed_runs and retry_at: a failed run is due again after its backoff
--   (fail_reconciliation_run takes the delay), not after a whole interval, and a run that keeps
--   failing shows (bitrix_sync_reconciliation_failed_runs);
-- - metric_events counts alerts whose smart-process item was deleted (machine 'alert',
--   bitrix_sync_business_alerts_remote_missing_total), and metrics_snapshot() exports the failed
--   runs, the reconciliation intervals, how long alerts have waited for the smart process and
--   whether they go there at all;
-- - the alert smart process's settings are validated across keys (_alert_settings_errors): terminal
--   stages distinct from each other and from the open ones, field names that are smart-process
--   fields, one each, and, while alerts go to the CRM, every stage and item field the mirror needs;
--   the new key alerts.database_only keeps alerts in the database on purpose.
--
-- The active settings version must pass the new alert rules, or the migration stops (BS094) and
-- changes nothing: the service would otherwise refuse that version at its next start.
set local lock_timeout = '10s';

alter table bitrix_sync.reconciliation_cursors
  add column if not exists failed_runs integer not null default 0,
  add column if not exists retry_at timestamptz;
-- A handful of rows (one per job type), all 0 now: nothing to validate at leisure.
alter table bitrix_sync.reconciliation_cursors
  -- squawk-ignore constraint-missing-not-valid
  add constraint reconciliation_cursors_failed_runs_check check (failed_runs >= 0);
comment on column bitrix_sync.reconciliation_cursors.failed_runs is
  'Runs that failed since the last successful one (a run given back at shutdown does not count); 0 after a success.';
comment on column bitrix_sync.reconciliation_cursors.retry_at is
  'When a failed run is due again (its backoff); the interval since the last start still applies when it is later.';

-- One more counted machine: business alerts whose item was deleted in the CRM (remote_missing).
-- Both tables hold a few rows (metric_events is folded at every scrape, the totals one per series),
-- and each new CHECK admits more than the one it replaces.
alter table bitrix_sync.metric_events
  drop constraint metric_events_machine_check,
  -- squawk-ignore constraint-missing-not-valid
  add constraint metric_events_machine_check
    check (machine in ('workflow', 'command', 'webhook', 'dead_letter', 'alert'));
alter table bitrix_sync.metric_event_totals
  drop constraint metric_event_totals_machine_check,
  -- squawk-ignore constraint-missing-not-valid
  add constraint metric_event_totals_machine_check
    check (machine in ('workflow', 'command', 'webhook', 'dead_letter', 'alert'));

-- >>> sql/settings.sql (included)
-- Hot settings (§12.3): a typed catalogue, versions with validation status and audit, activation of
-- validated versions only, rollback, and a NOTIFY so workers reload.

-- Every key has bounds (the table's CHECK settings_bounded): integers and numbers a range (integers
-- within int4, so every consumer reads them as int4), text a maximum length, enums their values, the
-- json object its allowed entries and the maximum length of each value.
insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, 2147483647, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.database_only', 'boolean', 'false', null, null, null, null, false, 'true: business alerts stay in the database (bitrix_sync.status_alerts) and no smart-process item is made or changed, so the smart process need not exist. false (default): alerts go to the smart process, whose settings must then be complete, and preflight fails while they cannot.'),
  ('alerts.entity_type_id', 'integer', null, 128, 2147483647, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, '["alert_number", "candidate_contact_ids", "correlation_id", "current_contact_id", "details", "fingerprint", "first_occurred_at", "last_occurred_at", "occurrence_count", "previous_alert_number", "selected_contact_id", "severity", "type", "user_id"]', 64, false, 'Smart-process field names (ufCrm<type>_...) by logical alert field: alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation; one field per entry. All of them (the item fields of §11) while alerts go to the smart process. alert_number is what an unanswered alert.add is looked up by.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, 2147483647, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, null, false, 'Resolution SLA of an alert in calendar hours from its first occurrence (nights, weekends and holidays count); 24 by default.'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, 64, true, 'Terminal stage ID: closed without resolution. Differs from every other stage; required while alerts go to the smart process.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, 64, true, 'Stage ID: in progress (open; optional).'),
  ('alerts.stage_new', 'text', null, null, null, null, 64, true, 'Stage ID for new alerts (open); required while alerts go to the smart process.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, 64, true, 'Terminal stage ID: resolved. Differs from every other stage; required while alerts go to the smart process.'),
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
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, null, false, 'Ops alert (§10.2) when the Contacts a run recovered without a webhook exceed this share of the changed linked Contacts it read; this or reconcile.recovered_spike_threshold is enough.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, null, false, 'Ops alert (§10.2) when a run recovers at least this many Contacts without a webhook and more than twice the usual (recovered_baseline); this or reconcile.recovered_spike_ratio is enough.'),
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

-- The alert smart process's rules across keys (§11). Terminal stages are told apart from each other
-- and from the open ones: a resolved stage equal to the new one would close every new item at the
-- next poll. Field names are smart-process fields (src/alerts/mirror.ts skips anything else), one per
-- logical field. While alerts go to the smart process (alerts.entity_type_id set, alerts.database_only
-- false) the new and both terminal stages and every item field of §11 (the catalogue's allowed
-- entries of alerts.fields) are named. src/settings-schema.ts (alertSettingsIssues) says the same in
-- the same words; test/integration/settings-schema.test.ts keeps them equal.
create or replace function bitrix_sync._alert_settings_errors(p_values jsonb) returns jsonb
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_eff jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_stage record;
  v_other record;
  v_fields jsonb;
  v_missing text;
  v_dup record;
  v_entry record;
begin
  if p_values is null or pg_catalog.jsonb_typeof(p_values) <> 'object' then
    return v_errors;
  end if;
  -- The effective alerts.* values: the version's, else the catalogue default.
  select pg_catalog.jsonb_object_agg(s.key, coalesce(p_values -> s.key, s.default_value, 'null'::jsonb))
    into v_eff
    from bitrix_sync.settings s
   where s.key like 'alerts.%';
  -- Terminal stages against every other stage (each pair once; a terminal stage against the open ones).
  for v_stage in
    select t.key, t.ord, v_eff ->> t.key as value
      from (values ('alerts.stage_resolved', 1), ('alerts.stage_closed_without_resolution', 2)) t(key, ord)
  loop
    continue when v_stage.value is null;
    for v_other in
      select o.key, v_eff ->> o.key as value
        from (values ('alerts.stage_new', 0), ('alerts.stage_in_progress', 0), ('alerts.stage_resolved', 1)) o(key, ord)
       where o.ord < v_stage.ord
    loop
      if v_other.value = v_stage.value then
        v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format('%s: a terminal stage must differ from %s', v_stage.key, v_other.key));
      end if;
    end loop;
  end loop;
  v_fields := v_eff -> 'alerts.fields';
  if pg_catalog.jsonb_typeof(v_fields) = 'object' then
    for v_entry in select e.key, e.value from pg_catalog.jsonb_each(v_fields) e order by e.key collate "C" loop
      if pg_catalog.jsonb_typeof(v_entry.value) = 'string'
         and (v_entry.value #>> '{}') !~ '^ufCrm[0-9]*_[A-Za-z0-9_]+$' then
        v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
          'alerts.fields: entry %s must name a smart-process field (ufCrm<type>_<name>)', pg_catalog.left(v_entry.key, 64)));
      end if;
    end loop;
    for v_dup in
      select e.value #>> '{}' as field, pg_catalog.string_agg(e.key, ', ' order by e.key collate "C") as entries
        from pg_catalog.jsonb_each(v_fields) e
       where pg_catalog.jsonb_typeof(e.value) = 'string'
       group by 1 having count(*) > 1 order by min(e.key collate "C")
    loop
      v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
        'alerts.fields: entries %s name the same field; each needs its own', v_dup.entries));
    end loop;
  end if;
  -- Alerts go to the smart process: what the mirror needs must be there.
  if pg_catalog.jsonb_typeof(v_eff -> 'alerts.entity_type_id') = 'number'
     and (v_eff -> 'alerts.database_only') is distinct from 'true'::jsonb then
    for v_stage in
      select k.key from (values ('alerts.stage_new'), ('alerts.stage_resolved'), ('alerts.stage_closed_without_resolution')) k(key)
       where v_eff ->> k.key is null
    loop
      v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
        '%s: required while alerts.entity_type_id is set (or set alerts.database_only to keep alerts in the database)', v_stage.key));
    end loop;
    select pg_catalog.string_agg(a.name, ', ' order by a.name collate "C") into v_missing
      from bitrix_sync.settings s
     cross join lateral pg_catalog.jsonb_array_elements_text(s.allowed_values) a(name)
     where s.key = 'alerts.fields'
       and (pg_catalog.jsonb_typeof(v_fields) <> 'object' or not (v_fields ? a.name));
    if v_missing is not null then
      v_errors := v_errors || pg_catalog.to_jsonb(pg_catalog.format(
        'alerts.fields: required while alerts.entity_type_id is set (§11 item fields); missing %s', v_missing));
    end if;
  end if;
  return v_errors;
end $$;
comment on function bitrix_sync._alert_settings_errors(jsonb) is
  'Validation messages of the alert smart process''s settings across keys (§11): terminal stages distinct from each other and from the open ones, alerts.fields naming smart-process fields, one each, and, while alerts.entity_type_id is set and alerts.database_only is not, the new and terminal stages and every item field present. Part of _settings_errors; empty array when valid.';

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
  v_errors := v_errors || bitrix_sync._alert_settings_errors(p_values);
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

do $$
declare
  v_errors text;
begin
  select string_agg(e, '; ') into v_errors
    from jsonb_array_elements_text(bitrix_sync._alert_settings_errors(
           (select v.settings_values from bitrix_sync.settings_versions v where v.status = 'active'))) e;
  if v_errors is not null then
    raise exception 'migration 000031 stopped: the active settings version has alert settings that are now refused: %', v_errors
      using errcode = 'BS094',
            hint = 'Nothing was changed. Activate a version with complete, distinct alert stages and every alerts.fields entry (or alerts.entity_type_id null), then run the migration again (docs/migrations.md).';
  end if;
end $$;

-- >>> sql/reconciliation.sql (included)
-- Reconciliation runs (§10.2, §10.3): the cursor row of each job is its lock. A run is claimed when
-- it is due (the interval passed, or forced) and no other run holds the cursor; a run still marked
-- running after reconcile.lease_sec is taken to have died. The lease token fences the finish, and
-- the watermark moves only when a whole run succeeded. A failed run is due again at its retry_at
-- (the caller's backoff, src/crm/backoff.ts), never later than a whole interval after it started;
-- failed_runs counts the failures since the last success for the ops alert.

create or replace function bitrix_sync.claim_reconciliation_cursor(
  p_job_type text, p_interval interval, p_force boolean default false, p_overlap interval default null
) returns setof bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('reconcile.lease_sec') #>> '{}')::double precision);
begin
  if p_interval is null or p_interval < interval '0' or p_overlap < interval '0' then
    raise exception 'a reconciliation claim needs a non-negative interval (and overlap)'
      using errcode = 'BS004', hint = 'Check reconcile.contacts_interval_sec, alerts.reconcile_interval_sec and reconcile.overlap_sec.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
    return;
  end if;
  insert into bitrix_sync.reconciliation_cursors (job_type) values (p_job_type) on conflict do nothing;
  select * into v_row from bitrix_sync.reconciliation_cursors r
   where r.job_type = p_job_type for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= pg_catalog.now() - v_lease then
    return; -- a run is in progress
  end if;
  -- Due: the interval passed since the last start, or, after a failure, its backoff did.
  if not coalesce(p_force, false)
     and v_row.last_run_started_at > pg_catalog.now() - p_interval
     and not coalesce(v_row.last_run_status = 'failed' and v_row.retry_at <= pg_catalog.now(), false) then
    return; -- not due yet
  end if;
  update bitrix_sync.reconciliation_cursors r
     set last_run_started_at = pg_catalog.now(), last_run_status = 'running', lease_token = pg_catalog.gen_random_uuid(),
         overlap = coalesce(p_overlap, r.overlap), retry_at = null
   where r.job_type = p_job_type
  returning * into v_row;
  return next v_row;
end $$;
comment on function bitrix_sync.claim_reconciliation_cursor(text, interval, boolean, interval) is
  'Starts a run of job p_job_type when it is due (last start at least p_interval ago, a failed run''s retry_at reached, or p_force) and no live run holds the cursor (a running run older than reconcile.lease_sec is taken over). Returns the cursor with a new lease_token and last_run_started_at = now(), the next watermark, and failed_runs as it stands (the failures before this run); no row when nothing is to be run, and none before perform_cutover().';

create or replace function bitrix_sync.finish_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  update bitrix_sync.reconciliation_cursors r
     set watermark = r.last_run_started_at, last_success_at = pg_catalog.now(), last_run_status = 'succeeded',
         last_error_code = null, last_scanned = p_scanned, last_updated = p_updated,
         last_recovered = coalesce(p_recovered, r.last_recovered),
         -- Smoothed usual value of recovered Contacts, for the spike alert of §10.2.
         recovered_baseline = case when p_recovered is null then r.recovered_baseline
                                   else coalesce(r.recovered_baseline * 0.8 + p_recovered * 0.2, p_recovered) end,
         lease_token = null, failed_runs = 0, retry_at = null
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_reconciliation_run(text, uuid, integer, integer, integer) is
  'running -> succeeded: the watermark moves to the run''s start, the counts are recorded (p_recovered also feeds the spike baseline), failed_runs goes back to 0. Refuses a run whose lease was taken over (BS001).';

-- The retry delay is a new argument (000031): the three-argument form is replaced, not overloaded.
drop function if exists bitrix_sync.fail_reconciliation_run(text, uuid, text);
create or replace function bitrix_sync.fail_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_error_code text, p_retry_after interval default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  perform bitrix_sync._check_code(p_error_code);
  if p_retry_after < interval '0' then
    raise exception 'a reconciliation retry delay cannot be negative'
      using errcode = 'BS004', hint = 'Pass the backoff delay (src/crm/backoff.ts), or null to wait for the interval.';
  end if;
  update bitrix_sync.reconciliation_cursors r
     set last_run_status = 'failed', last_error_code = p_error_code, lease_token = null,
         -- A run given back at shutdown did not fail: the next replica starts it at once.
         failed_runs = r.failed_runs + case when p_error_code = 'shutdown' then 0 else 1 end,
         retry_at = case when p_error_code = 'shutdown' then pg_catalog.now()
                         else pg_catalog.now() + p_retry_after end
   where r.job_type = p_job_type and r.last_run_status = 'running' and r.lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fail_reconciliation_run(text, uuid, text, interval) is
  'running -> failed with a safe code; the watermark stays, so the next run reads the same window again. The run is due again after p_retry_after (the caller''s backoff; null: after the interval, as before) and failed_runs grows by one (not for shutdown, which is due at once). Refuses a run whose lease was taken over (BS001).';
-- <<< sql/reconciliation.sql
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

create or replace function bitrix_sync.tg_business_alerts__count_remote_missing() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('alert', new.alert_type, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_business_alerts__count_remote_missing() is
  'AFTER UPDATE OF status trigger: appends one alert whose smart-process item was found deleted (open -> remote_missing, §10.3) to metric_events for bitrix_sync_business_alerts_remote_missing_total.';

drop trigger if exists _900_count_remote_missing on bitrix_sync.business_alerts;
create trigger _900_count_remote_missing after update of status on bitrix_sync.business_alerts
  for each row when (new.status = 'remote_missing' and old.status is distinct from new.status)
  execute function bitrix_sync.tg_business_alerts__count_remote_missing();
comment on trigger _900_count_remote_missing on bitrix_sync.business_alerts is
  'Counts each alert whose smart-process item was deleted in the CRM (remote_missing) for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.metrics_snapshot(p_bucket text default null, p_check_mappings boolean default false)
returns table (family text, labels jsonb, value double precision)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_burst double precision := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::double precision;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
  v_cutover timestamptz := (select c.cutover_watermark from bitrix_sync.cutover c);
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
    -- Alerts whose smart-process item is behind; both statuses always present (0 when none). The
    -- age counts from the last change, or from the alert's creation while it has no item at all:
    -- an alert that keeps recurring but never reaches the smart process still ages.
    select s.status, coalesce(m.count, 0) as count,
           coalesce(extract(epoch from now() - m.oldest_at), 0)::bigint as oldest_age_sec
      from unnest(array['pending', 'failed']) s(status)
      left join (select a.crm_sync_status as status, count(*) as count,
                        min(case when a.item_id is null then a.created_at else a.updated_at end) as oldest_at
                   from bitrix_sync.business_alerts a
                  where a.crm_sync_status <> 'synced'
                  group by a.crm_sync_status) m on m.status = s.status
  ), cursors as (
    -- The alert job runs only while alerts.entity_type_id is set: a cursor left from an earlier
    -- configuration does not trail.
    select r.job_type, r.watermark, r.failed_runs from bitrix_sync.reconciliation_cursors r
     where r.job_type <> 'alerts' or bitrix_sync._active_setting('alerts.entity_type_id') <> 'null'::jsonb
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
  -- From the cutover while no run has succeeded yet: a job that never succeeds still trails.
  select 'bitrix_sync_reconciliation_cursor_lag_seconds', jsonb_build_object('job_type', r.job_type),
         greatest(0, extract(epoch from now() - coalesce(r.watermark, v_cutover)))::float8
    from cursors r
   where coalesce(r.watermark, v_cutover) is not null
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
    from unnest(array['sync_queue', 'workflow', 'crm_command', 'webhook']) k(kind)
  -- Silent failures (docs/runbook.md): a run that keeps failing, the interval each lag is measured
  -- against, alerts that do not reach the smart process, items deleted in the CRM.
  union all
  select 'bitrix_sync_reconciliation_failed_runs', jsonb_build_object('job_type', r.job_type), r.failed_runs::float8
    from cursors r
  union all
  select 'bitrix_sync_reconciliation_interval_seconds', jsonb_build_object('job_type', i.job_type),
         (bitrix_sync._active_setting(i.key) #>> '{}')::float8
    from (values ('contacts', 'reconcile.contacts_interval_sec'), ('alerts', 'alerts.reconcile_interval_sec')) i(job_type, key)
  union all
  select 'bitrix_sync_business_alerts_unmirrored_oldest_age_seconds', jsonb_build_object('mirror_status', m.status),
         m.oldest_age_sec::float8 from mirror m
  union all
  select 'bitrix_sync_business_alerts_mirror_enabled', '{}'::jsonb,
         case when bitrix_sync._active_setting('alerts.database_only') = 'true'::jsonb then 0 else 1 end::float8
  union all
  -- Present from the start (0 before the first), so increase() sees the first one.
  select 'bitrix_sync_business_alerts_remote_missing_total', '{}'::jsonb,
         coalesce((select sum(e.n) from events e where e.machine = 'alert' and e.to_state = 'remote_missing'), 0)::float8;
end $$;
comment on function bitrix_sync.metrics_snapshot(text, boolean) is
  'Every database-derived Prometheus sample for GET /metrics in one call: queue, workflow, command and inbox depths and oldest ages (live states), open dead letters, business alerts and their mirror (behind, its age, whether it is on, items deleted in the CRM), reconciliation cursor lag, failed runs and intervals, the limiter bucket p_bucket, and the transition counters (folded from metric_events first). p_check_mappings adds the mapping invariant count (a pass over the active mappings). Rows: (family, labels, value); labels are low-cardinality only.';
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
   'Intents appear through the fold of the App''s journal (fold_intent_journal, security definer); the runtime moves them through the lease functions and never inserts one.'),
  ('table', 'han_app.sync_queue_journal', array['SELECT'], array[]::text[], array['SELECT'],
   'The trigger (security definer) appends and fold_intent_journal (security definer) takes; the runtime and the App may look, neither writes.'),
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
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)', 'UPDATE (status, closed_at, close_reason, workflow_id)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions; the user and the Contact of a link never change.'),
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token, failed_runs, retry_at)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash, trace_context)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at, trace_context)'],
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
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement (and the readiness probe of that path).'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
  ('function', 'bitrix_sync.fold_intent_journal(integer,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Called first by claim_sync_tasks and perform_cutover; an admin may fold to see recorded intents in the queue now.'),
  ('function', 'bitrix_sync.watch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop takes the intake watch before it sleeps (the App''s intents then NOTIFY).'),
  ('function', 'bitrix_sync.unwatch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop releases the intake watch when it wakes.'),
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).'),
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.step_context(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (the start of a step).'),
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  ('function', 'bitrix_sync.take_sync_tasks(uuid[],uuid[],uuid[],text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake of a claimed batch in one call.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.complete_commands(bigint[],uuid[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump settles a batch with it).'),
  ('function', 'bitrix_sync.bring_forward_commands(text[],integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump after a portal-wide failure).'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
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
  ('function', 'bitrix_sync.note_crm_answered(text,double precision,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
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
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
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
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue, start_or_join, accept_webhooks).'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue_command, start_or_join_workflow, accept_webhooks).'),
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
  ('function', 'bitrix_sync._alert_settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.'),
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_business_alerts__count_remote_missing()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
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
  revoke all on han_app.sync_queue_journal from public;
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
