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
  ('audit.auto_repair_kinds', 'json', '{}', null, null, '["contact_missing", "crm_master_behind", "inactive_user_linked", "phone_missing", "registered_inactive_user", "registered_unknown_user", "registered_wrong", "unmapped_user", "user_id_wrong"]', 3, false, 'Drift kinds the convergence audit repairs by itself after each run ("on"), as repair_drift would; every other kind waits for an admin. Empty (the default): no automatic repair.'),
  ('audit.budget_share', 'number', '0.05', 0.001, 0.5, null, null, false, 'Share of limiter.refill_per_sec the convergence audit may use, and only spare budget: a token of a full bucket, whose refill sync traffic is not using.'),
  ('audit.enabled', 'boolean', 'true', null, null, null, null, false, 'Whether the crontab''s convergence audit runs; a queued {"all": true} run goes ahead regardless.'),
  ('audit.grace_sec', 'integer', '1800', 0, 86400, null, null, false, 'A Contact changed more recently than this is not judged on its CRM-master fields: a webhook or the next reconciliation may still bring it (§10.2).'),
  ('audit.interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'A sampled convergence audit run is due this long after the last one started.'),
  ('audit.lease_sec', 'integer', '900', 60, 86400, null, null, false, 'An audit run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('audit.period_days', 'integer', '7', 1, 90, null, null, false, 'Every active link is compared with its Contact at least once in this many days; each run samples the least recently audited.'),
  ('audit.run_budget_sec', 'integer', '300', 10, 3600, null, null, false, 'An audit run stops sending requests after this long; the next run goes on where it stopped.'),
  ('audit.users_per_run', 'integer', '10000', 1, 10000000, null, null, false, 'A sampled run judges the user kinds (unmapped_user, inactive_user_linked) over at least this many App users, in id order from where the last run stopped, and more when audit.period_days needs more (twice its share of the users); a full run judges every user.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, null, false, 'Rows claimed from a queue per round trip.'),
  ('contract.date_filter', 'enum', '"offset"', null, null, '["offset", "no_offset"]', null, false, 'How reconciliation sends its >=updatedTime filter: "offset" (default, the documented form: ISO 8601 with +00:00) or "no_offset" (no offset, 12 hours earlier, for a portal that ignores a value with an offset: the window only widens, by up to 26 hours). npm run preflight -- --write says which the portal honours.'),
  ('contract.registered_filter', 'enum', '"1"', null, null, '["1", "Y"]', null, false, 'How reconciliation and the audit filter on the registration flag: "1" (default, documented for boolean user fields) or "Y". npm run preflight -- --write says which the portal honours.'),
  ('contract.registered_write', 'enum', '"1"', null, null, '["1", "Y"]', null, false, 'How crm.contact.add/update write the registration flag: "1" (1/0, default) or "Y" (Y/N). npm run preflight -- --write says which the portal stores.'),
  ('health.crm_stale_sec', 'integer', '300', 30, 86400, null, null, false, 'Readiness says degraded (crm_stale) when the CRM has had no success for this long while failures arrive (§14).'),
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, null, false, 'Lease length for queue rows, workflows, commands and webhooks.'),
  ('limiter.burst', 'integer', '5', 1, 250, null, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).'),
  ('mapping.hold_after_phone_link', 'boolean', 'false', null, null, null, null, false, 'After a link made by phone alone (B1.1, B2.1), hold the Contact''s name, e-mail and citizenship back from the App until a robot webhook reports a CRM change made after the link or an admin confirms (confirm_phone_link). Off: applied at once, which trusts that the App verifies phone numbers.'),
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
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
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
  -- The automatic repair is switched on or off per kind, nothing else.
  if jsonb_typeof(p_values -> 'audit.auto_repair_kinds') = 'object' and exists (
       select 1 from jsonb_each(p_values -> 'audit.auto_repair_kinds') e
        where e.value not in ('"on"'::jsonb, '"off"'::jsonb)) then
    v_errors := v_errors || to_jsonb('audit.auto_repair_kinds: every entry must be "on" or "off"'::text);
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;
comment on function bitrix_sync._settings_errors(jsonb) is
  'Validation messages for a complete settings object against the catalogue (types, bounds, maximum lengths, allowed values and entries, cross-field rules); empty array when valid.';

create or replace function bitrix_sync._normalise_settings(p_values jsonb) returns jsonb
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
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
  'Creates a draft version: the active values with p_changes applied, whole numbers of integer keys normalised (1036.0 -> 1036); created_by is the declared actor, created_db_user the login (session_user). Validate, then activate it.';

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
         validated_at = now(), validated_db_user = session_user
   where version = p_version;
  return v_errors;
end $$;
comment on function bitrix_sync.validate_settings_version(integer) is
  'draft -> validated, or -> rejected with the reasons (returned and stored); the values are normalised in the same change, and the login (session_user) is recorded in validated_db_user. A rejected version can never be activated.';

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
  update bitrix_sync.settings_versions
     set status = 'active', activated_by = btrim(p_actor), activated_db_user = session_user, activated_at = now()
   where version = p_version
  returning * into v_row;
  perform pg_notify('bitrix_sync_settings', v_row.version::text);
  return v_row;
end $$;
comment on function bitrix_sync.activate_settings_version(integer, text) is
  'validated -> active; the previous active version becomes superseded. Records who (the declared actor and the login, session_user) and when, and NOTIFYs bitrix_sync_settings.';

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
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
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
