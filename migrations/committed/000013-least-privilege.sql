--! Previous: sha1:754bac345ee3146cf69dedde9a77dfbad9941a69
--! Hash: sha1:224a8c3ff7ecac91f17a4e6373bdb3302da4f6a3
--! Message: least-privilege

-- Production safety, the database half (issue 10): nothing is claimed before the cutover (the gate
-- is in the claim functions, sql/cutover.sql); the cutover and the other admin functions are the
-- admin role's; the runtime role executes an explicit list of functions and writes only the
-- columns they write, from one privilege catalogue (sql/privileges.sql, applied by sql/grants.sql);
-- rows are born in their initial state and identity and audit columns never change
-- (sql/row_guards.sql); every setting has bounds and integers are stored as int4 prints them; one
-- event's or one receiver's failure no longer fails a receivers' call; one open rebind request per
-- target Contact.
set local lock_timeout = '10s';

-- 000012-trace-context was released before the migrations from here to 000017, which were
-- written against the functions without trace contexts: its new signatures are dropped here and
-- 000018-trace-context-privileges creates them again, with their privileges. Its columns and CHECKs
-- stay (000018 keeps them: add column if not exists); a running service of that release calls these
-- functions, so it is stopped before this migration, as for any other.
drop function if exists bitrix_sync.start_or_join_workflow(uuid, text, uuid, text, text);
drop function if exists bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text);
drop function if exists bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]);
drop function if exists bitrix_sync._trace_context(text);

-- >>> sql/roles.sql (included)
-- Roles (§13, DESIGN.md): created NOLOGIN if absent; deployment grants LOGIN and passwords.
-- Roles are cluster-wide, so this is safe to run in every database of the cluster.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'bitrix_sync_user') then
    create role bitrix_sync_user nologin;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'bitrix_sync_admin') then
    create role bitrix_sync_admin nologin;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'han_app_user') then
    create role han_app_user nologin;
  end if;
end $$;
comment on role bitrix_sync_user is 'bitrix-sync runtime: the functions it runs with and the columns they write (bitrix_sync.role_privileges); reads settings, rebind requests and the cutover. No DDL, no admin function.';
comment on role bitrix_sync_admin is 'Operators: the cutover, settings, rebind and webhook re-recording functions (security definer) and the status views; reads settings, rebind requests and the cutover.';
comment on role han_app_user is 'The HAN App: writes identity and profile; sync_queue rows appear through the trigger. Nothing in schema bitrix_sync.';
-- <<< sql/roles.sql

-- Text settings get a maximum length; json settings the length of each entry.
alter table bitrix_sync.settings add column if not exists max_length integer;
alter table bitrix_sync.settings drop constraint if exists settings_max_length_check;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.settings add constraint settings_max_length_check
  check (max_length is null or max_length between 1 and 10000);
comment on column bitrix_sync.settings.max_length is
  'text: the longest value allowed; json: the longest value of each entry (its keys are allowed_values).';

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
  ('alerts.fields', 'json', '{}', null, null, '["alert_number", "candidate_contact_ids", "correlation_id", "current_contact_id", "details", "fingerprint", "first_occurred_at", "last_occurred_at", "occurrence_count", "previous_alert_number", "selected_contact_id", "severity", "type", "user_id"]', 64, false, 'Smart-process field names (ufCrm<type>_...) by logical alert field: alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, 2147483647, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, null, false, 'Resolution SLA of an alert (one business day by default).'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, 64, true, 'Terminal stage ID: closed without resolution.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, 64, true, 'Stage ID: in progress.'),
  ('alerts.stage_new', 'text', null, null, null, null, 64, true, 'Stage ID for new alerts.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, 64, true, 'Terminal stage ID: resolved.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, null, false, 'Rows claimed from a queue per round trip.'),
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

-- Every key has bounds; integers within int4, so every reader can cast them. The catalogue is a
-- few dozen rows and sql/settings.sql just wrote every one of them, so validating at once is quick.
alter table bitrix_sync.settings drop constraint if exists settings_bounded;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.settings add constraint settings_bounded check (
  case value_type
    when 'integer' then min_value is not null and max_value is not null and min_value <= max_value
                        and min_value = trunc(min_value) and max_value = trunc(max_value)
                        and min_value >= -2147483648 and max_value <= 2147483647
    when 'number' then min_value is not null and max_value is not null and min_value <= max_value
    when 'text' then max_length is not null
    when 'enum' then allowed_values is not null
    when 'json' then allowed_values is not null and max_length is not null
    else true
  end);

-- The active version may hold 1036.0 for an integer key (stored as written before this
-- migration). Its values are history, so a normalised copy is proposed and, when it validates,
-- activated; when it does not, the active version stays and readiness reports the problem.
do $$
declare
  v_active bitrix_sync.settings_versions;
  v_version integer;
begin
  select * into v_active from bitrix_sync.settings_versions where status = 'active';
  -- Compared as text: jsonb equality already takes 1036.0 for 1036.
  if found and v_active.settings_values::text <> bitrix_sync._normalise_settings(v_active.settings_values)::text then
    v_version := bitrix_sync.propose_settings('{}'::jsonb, 'migration', 'integer settings stored as int4 (000013)');
    if jsonb_array_length(bitrix_sync.validate_settings_version(v_version)) = 0 then
      perform bitrix_sync.activate_settings_version(v_version, 'migration');
    end if;
  end if;
end $$;

-- One open rebind request per target Contact (§5.4). Two open requests for one target can only
-- come from before this migration; a person decides which one goes on.
do $$
begin
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.status in ('requested', 'in_progress')
              group by r.target_contact_id having count(*) > 1) then
    raise exception 'two or more open rebind requests name the same target Contact'
      using errcode = 'BS093',
            hint = 'Find them with: select target_contact_id, id, status from bitrix_sync.rebind_requests where status in (''requested'', ''in_progress'') order by 1; let one finish, then run the migration again.';
  end if;
end $$;
-- rebind_requests is an audit table of a few rows per operator action: building the index inside
-- this transaction blocks nobody for long, and lock_timeout above bounds the wait for the lock.
-- squawk-ignore require-concurrent-index-creation
create unique index if not exists rebind_requests_one_open_per_target_uq
  on bitrix_sync.rebind_requests (target_contact_id) where status in ('requested', 'in_progress');
comment on index bitrix_sync.rebind_requests_one_open_per_target_uq is
  'A Contact is the target of at most one open rebind request (request_bitrix_contact_rebind raises BS009).';

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
-- >>> sql/cutover.sql (included)
-- Cutover from the stub to full sync (§17): one watermark; intents recorded before it that were
-- still waiting are cancelled with reason initial_full_sync_cutover. Running it again changes nothing.
-- Until it has run, every claim function returns nothing (the gate below): no replica, CLI worker
-- or psql session can process stub-era intents, whatever its configuration says. Receivers still
-- record webhooks; they wait in the inbox.

create or replace function bitrix_sync.cutover_performed() returns boolean
language sql stable parallel safe as $$
  select exists (select 1 from bitrix_sync.cutover)
$$;
comment on function bitrix_sync.cutover_performed() is
  'The processing gate (§17): true once perform_cutover() has run. The claim functions return nothing while it is false; readiness reports cutover_not_performed.';

create or replace function bitrix_sync.perform_cutover(p_actor text)
returns table (cutover_watermark timestamptz, cancelled_count integer, already_done boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.cutover;
  v_count integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'cutover needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  -- Serialize concurrent callers; the first one wins, the others see its result.
  perform pg_advisory_xact_lock(hashtext('bitrix_sync.perform_cutover'));
  select * into v_row from bitrix_sync.cutover;
  if found then
    return query select v_row.cutover_watermark, v_row.cancelled_count, true;
    return;
  end if;
  with cancelled as (
    update han_app.sync_queue q
       set status = 'cancelled', cancel_reason = 'initial_full_sync_cutover', completed_at = now(), updated_at = now(),
           locked_by = null, locked_until = null, lease_token = null
     -- leased: held by a worker of a release without the gate; its completion is refused (BS001).
     where q.status in ('pending', 'retry_wait', 'leased')
       and q.task_type like 'contact.%'
       and q.created_at < now()
    returning 1
  )
  select count(*) into v_count from cancelled;
  insert into bitrix_sync.cutover (cutover_watermark, cancelled_count, performed_by)
  values (now(), v_count, btrim(p_actor))
  returning * into v_row;
  return query select v_row.cutover_watermark, v_row.cancelled_count, false;
end $$;
comment on function bitrix_sync.perform_cutover(text) is
  'Admin entry point (§17 steps 3-4): records cutover_watermark (now), cancels earlier pending/retry_wait/leased contact intents with cancel_reason initial_full_sync_cutover, and opens the processing gate. Idempotent: a second call returns the first result and changes nothing.';
-- <<< sql/cutover.sql
-- >>> sql/queue.sql (included)
-- Leases on han_app.sync_queue (§6.1): short claim transactions with FOR UPDATE SKIP LOCKED, a new
-- lease token on every claim, and completion only under the current token (fencing).

create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable as $$
begin
  if p_code is null or p_code !~ '^[a-z0-9][a-z0-9_.]{0,63}$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
comment on function bitrix_sync._check_code(text) is
  'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';

create or replace function bitrix_sync._refuse_stale(p_what text, p_id text) returns void
language plpgsql as $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;
comment on function bitrix_sync._refuse_stale(text, text) is
  'Raises BS001 for a completion that does not present the current lease token (a stale holder).';

create or replace function bitrix_sync.claim_sync_tasks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof han_app.sync_queue
language plpgsql as $$
declare
  v_watermark timestamptz;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- Nothing is processed before the cutover, and after it only intents recorded since the
  -- watermark (§17 step 8), also when an expired lease is reclaimed.
  select c.cutover_watermark into v_watermark from bitrix_sync.cutover c;
  if v_watermark is null then
    return;
  end if;
  return query
  with due as (
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
     where q.status in ('pending', 'retry_wait') and q.next_attempt_at <= now()
       and q.created_at >= v_watermark
     order by q.next_attempt_at, q.created_at
     limit p_limit
     for update skip locked
  ), expired as (
    select q.id, q.locked_until as sort_at from han_app.sync_queue q
     where q.status = 'leased' and q.locked_until < now() and q.created_at >= v_watermark
     order by q.locked_until
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) c order by sort_at limit p_limit
  )
  update han_app.sync_queue q
     set status = 'leased',
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         lease_token = gen_random_uuid(),
         attempt_count = q.attempt_count + 1,
         updated_at = now()
    from picked
   where q.id = picked.id
  returning q.*;
end $$;
comment on function bitrix_sync.claim_sync_tasks(text, integer, interval) is
  'Claims up to p_limit due intents recorded since the cutover watermark (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED; each gets a new lease_token. Two claimers never get the same row. Returns nothing before perform_cutover().';

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue set locked_until = now() + p_lease, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_sync_task_lease(uuid, uuid, interval) is
  'Extends a held lease. Refuses a stale token (BS001).';

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_sync_task(uuid, uuid) is
  'leased -> processed under the current lease token; a stale holder is refused (BS001).';

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'pending', locked_by = null, locked_until = null, lease_token = null,
         attempt_count = greatest(attempt_count - 1, 0), updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_sync_task(uuid, uuid) is
  'leased -> pending without spending an attempt (shutdown, paused sync). Refuses a stale token (BS001).';

create or replace function bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_row.id
  returning * into v_row;
  -- The intent's first attempt is its arrival: it is claimed as soon as it is due.
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, operation, error_code, attempt_count, first_attempt_at, deadline_at)
  values ('sync_queue', v_row.id::text, v_row.task_type, p_error_code, v_row.attempt_count, v_row.created_at,
          bitrix_sync._retry_deadline(v_row.created_at));
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue, text) is
  'Internal: moves a held intent to dead_letter and writes its technical DLQ row (first attempt = created_at).';

create or replace function bitrix_sync.retry_sync_task(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.created_at) then
    return bitrix_sync._dead_letter_sync_task_row(v_row, 'retry_horizon_exceeded');
  end if;
  update han_app.sync_queue
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_sync_task(uuid, uuid, text, interval) is
  'leased -> retry_wait after p_delay with a safe error code; when the retry would fall past the horizon (created_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. The returned status says which. Refuses a stale token (BS001).';

create or replace function bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return bitrix_sync._dead_letter_sync_task_row(v_row, p_error_code);
end $$;
comment on function bitrix_sync.dead_letter_sync_task(uuid, uuid, text) is
  'leased -> dead_letter and a technical_dead_letters row with the safe code. Refuses a stale token (BS001).';

create or replace function bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_reason);
  update han_app.sync_queue
     set status = 'cancelled', cancel_reason = p_reason, completed_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.cancel_sync_task(uuid, uuid, text) is
  'leased -> cancelled with a reason code (e.g. user not eligible). Refuses a stale token (BS001).';
-- <<< sql/queue.sql
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
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged).';

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
  -- A workflow is first attempted when it is created: intake starts it at once.
  v_deadline := bitrix_sync._retry_deadline(v_row.created_at);
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    insert into bitrix_sync.technical_dead_letters
      (source, source_id, workflow_id, operation, error_code, attempt_count, first_attempt_at, deadline_at,
       correlation_id)
    values ('workflow', v_row.id::text, v_row.id, v_row.workflow_type, 'retry_horizon_exceeded',
            v_row.attempt_count, v_row.created_at, v_deadline, v_row.correlation_id);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.schedule_workflow_retry(uuid, uuid, text, interval) is
  'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';
-- <<< sql/workflows.sql
-- >>> sql/commands.sql (included)
-- CRM commands (§7.2, §8, §9): issued by a workflow step, claimed by the pump under a lease,
-- marked in_flight (the durable "send started" marker) before the HTTP batch leaves, and completed
-- per sub-result. A write with no reply becomes uncertain and is never resent blindly.

create or replace function bitrix_sync._is_write_command(p_command_type text) returns boolean
language sql immutable parallel safe as $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;
comment on function bitrix_sync._is_write_command(text) is
  'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';

create or replace function bitrix_sync._wake_workflow(p_workflow_id uuid) returns void
language plpgsql as $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now()
   where id = p_workflow_id and state = 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync._wake_workflow(uuid) is
  'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  select * into v_wf from bitrix_sync.workflow_instances where id = p_workflow_id for update;
  if not found or v_wf.state <> 'running' or v_wf.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id)
  returning * into v_cmd;
  perform bitrix_sync.fire_workflow_event(p_workflow_id, p_lease_token, 'await_crm',
                                          jsonb_build_object('current_step', p_step));
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm at step p_step. The unique index allows one active command per workflow.';

create or replace function bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_cmd bitrix_sync.crm_commands;
begin
  if p_command_type not like 'alert.%' then
    raise exception 'alert commands must be alert.* types, got %', p_command_type
      using errcode = 'BS004', hint = 'Contact commands belong to a workflow: use issue_command().';
  end if;
  insert into bitrix_sync.crm_commands (alert_id, command_type, params)
  values (p_alert_id, p_command_type, coalesce(p_params, '{}'::jsonb))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_alert_command(bigint, text, jsonb) is
  'Queues a smart-process command for a business alert; independent of workflow steps (§7.1).';

create or replace function bitrix_sync.claim_commands(
  p_worker text, p_limit integer default 20, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row record;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the batch.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
    return;
  end if;

  -- A holder that died with a request out: a write may have landed (uncertain), a read is retried.
  for v_row in
    select c.id, c.command_type, c.workflow_id from bitrix_sync.crm_commands c
     where c.status = 'in_flight' and c.locked_until < now()
     for update skip locked
  loop
    if bitrix_sync._is_write_command(v_row.command_type) then
      update bitrix_sync.crm_commands
         set status = 'uncertain', lease_token = null, locked_by = null, locked_until = null,
             last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
      if v_row.workflow_id is not null then
        perform bitrix_sync._wake_workflow(v_row.workflow_id);
      end if;
    else
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(), lease_token = null, locked_by = null,
             locked_until = null, last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
    end if;
  end loop;

  -- retry_wait -> pending (due), then claim pending and expired leased rows.
  update bitrix_sync.crm_commands c set status = 'pending'
   where c.id in (select d.id from bitrix_sync.crm_commands d
                   where d.status = 'retry_wait' and d.next_attempt_at <= now()
                   for update skip locked);

  return query
  with due as (
    select c.id, c.next_attempt_at as sort_at from bitrix_sync.crm_commands c
     where c.status = 'pending' and c.next_attempt_at <= now()
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  ), expired as (
    select c.id, c.locked_until as sort_at from bitrix_sync.crm_commands c
     where c.status = 'leased' and c.locked_until < now()
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) x order by sort_at limit p_limit
  )
  update bitrix_sync.crm_commands c
     set status = 'leased', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
         locked_until = now() + p_lease
    from picked
   where c.id = picked.id
  returning c.*;
end $$;
comment on function bitrix_sync.claim_commands(text, integer, interval) is
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait. Returns nothing before perform_cutover().';

-- The horizon used to be passed in by the pump; it is read from the settings here now.
drop function if exists bitrix_sync.send_commands(bigint[], uuid[], uuid, interval);

create or replace function bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid)
returns setof bigint
language plpgsql as $$
begin
  if coalesce(array_length(p_ids, 1), 0) <> coalesce(array_length(p_lease_tokens, 1), 0) then
    raise exception 'send_commands needs one lease token per command id'
      using errcode = 'BS004', hint = 'Pass the ids and tokens returned by claim_commands(), in the same order.';
  end if;
  return query
  update bitrix_sync.crm_commands c
     set status = 'in_flight', sent_at = now(), batch_id = p_batch_id, attempt_count = c.attempt_count + 1,
         first_sent_at = coalesce(c.first_sent_at, now()),
         deadline_at = bitrix_sync._retry_deadline(coalesce(c.first_sent_at, now()))
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where c.id = t.id and c.status = 'leased' and c.lease_token = t.token
  returning c.id;
end $$;
comment on function bitrix_sync.send_commands(bigint[], uuid[], uuid) is
  'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The first send stamps first_sent_at, where the retry horizon starts.';

create or replace function bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_command(bigint, uuid, jsonb) is
  'in_flight -> succeeded with a safe response projection, and wakes the workflow. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.release_command(p_id bigint, p_lease_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'pending', lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_command(bigint, uuid) is
  'leased -> pending without sending (no limiter token, method blocked, shutdown). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._check_bitrix_error(p_error text) returns void
language plpgsql immutable as $$
begin
  -- Bitrix24 error codes are identifiers (QUERY_LIMIT_EXCEEDED, ERROR_CORE, expired_token); the
  -- error_description next to them may quote field values, so only the identifier is kept (§9).
  if p_error is not null and p_error !~ '^[A-Za-z][A-Za-z0-9_]{0,63}$' then
    raise exception 'bitrix error must be the Bitrix24 error code (an identifier of at most 64 characters)'
      using errcode = 'BS004',
            hint = 'Pass the reply''s "error" field, e.g. QUERY_LIMIT_EXCEEDED, never error_description or raw text.';
  end if;
end $$;
comment on function bitrix_sync._check_bitrix_error(text) is
  'Refuses anything but a Bitrix24 error code identifier (null allowed), so raw reply text never reaches crm_commands or technical_dead_letters. SQLSTATE BS004.';

create or replace function bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands)
returns timestamptz
language sql stable as $$
  -- A command refused before it was ever sent has only its creation to count from.
  select coalesce(p_row.first_sent_at, p_row.created_at)
$$;
comment on function bitrix_sync._command_first_attempt(bitrix_sync.crm_commands) is
  'Internal: where a command''s retry horizon starts: its first send, or its creation if it was never sent.';

create or replace function bitrix_sync._dead_letter_command_row(
  p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
  v_first timestamptz := bitrix_sync._command_first_attempt(p_row);
begin
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
         deadline_at = bitrix_sync._retry_deadline(v_first),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
          p_http_status, left(p_bitrix_error, 64), v_row.attempt_count - v_row.limit_hits,
          v_first, v_row.deadline_at, v_row.correlation_id);
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands, text, integer, text) is
  'Internal: moves a held command to dead_letter, writes the technical DLQ row (first attempt and horizon) and wakes its workflow.';

create or replace function bitrix_sync.retry_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean default true,
  p_http_status integer default null, p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- The horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
  end if;
  update bitrix_sync.crm_commands c
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_http_status = p_http_status,
         last_bitrix_error = left(p_bitrix_error, 64), deadline_at = v_deadline,
         -- QUERY_LIMIT_EXCEEDED is refused before execution: it is not an attempt (§9).
         limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
         lease_token = null, locked_by = null, locked_until = null
   where c.id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_command(bigint, uuid, text, interval, boolean, integer, text) is
  'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). When the retry would fall past the horizon (first send + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead; the returned status says which. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.mark_command_uncertain(bigint, uuid, text) is
  'in_flight -> uncertain: the request left and no reply came. The workflow recovers by searching, never by resending. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer default null,
  p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return bitrix_sync._dead_letter_command_row(v_row, p_error_code, p_http_status, p_bitrix_error);
end $$;
comment on function bitrix_sync.dead_letter_command(bigint, uuid, text, integer, text) is
  'leased|in_flight -> dead_letter with a technical DLQ row (permanent failure). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state = 'running' and w.lease_token = p_workflow_token
   for update of c;
  if not found then
    perform bitrix_sync._refuse_stale('workflow of command', p_command_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._workflow_holder(bigint, uuid) is
  'Internal: the command, locked, when the caller holds its workflow''s lease; otherwise BS001.';

create or replace function bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.begin_command_reconcile(bigint, uuid) is
  'uncertain -> reconcile: the workflow (holding its lease) starts the recovery search for an unanswered write.';

create or replace function bitrix_sync.resolve_command_reconcile(
  p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb default null,
  p_error_code text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  if v_row.status <> 'reconcile' then
    raise exception 'command % is %, not reconcile', p_id, v_row.status
      using errcode = 'BS002', hint = 'Call begin_command_reconcile() first.';
  end if;
  case p_outcome
    when 'succeeded' then
      update bitrix_sync.crm_commands
         set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null
       where id = p_id returning * into v_row;
    when 'retry' then
      -- The search proved the write did not land: sending it again cannot duplicate anything.
      perform bitrix_sync._check_code(coalesce(p_error_code, 'reconciled_not_applied'));
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      insert into bitrix_sync.technical_dead_letters
        (source, source_id, workflow_id, command_id, operation, error_code, attempt_count, first_attempt_at,
         deadline_at, correlation_id)
      values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
              v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
              bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)), v_row.correlation_id);
    else
      raise exception 'reconcile outcome must be succeeded, retry or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied) or dead_letter. Fenced by the workflow lease.';

create or replace function bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.reject_command(bigint, uuid, text) is
  'leased|in_flight -> dead_letter for a business failure (invalid phone, unknown citizenship): no technical DLQ row; the workflow wakes, parks in waiting_manual and raises a business alert (§9). Refuses stale tokens (BS001).';
-- <<< sql/commands.sql
-- >>> sql/webhooks.sql (included)
-- Webhook inbox (§7.3, §10.1): the receiver records an event durably and answers; processing
-- claims one event per entity and coalesces the other pending events of that entity into it, so
-- one CRM read covers them. The partial unique index below is the guarantee that one entity is
-- never processed by two workers at once.

-- Built with the table in 000002; every later include finds it and skips it.
-- squawk-ignore require-concurrent-index-creation
create unique index if not exists webhook_inbox_one_processing_per_entity_uq
  on bitrix_sync.webhook_inbox (receiver, entity_id) where status = 'processing';
comment on index bitrix_sync.webhook_inbox_one_processing_per_entity_uq is
  'At most one event of an entity is being processed at any time, whichever worker holds it.';

create or replace function bitrix_sync.record_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null,
  p_event_id text default null, p_source_ts timestamptz default null
) returns bigint
language plpgsql as $$
declare
  v_id bigint;
begin
  insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, event_id, source_ts)
  values (p_receiver, p_entity_type_id, p_entity_id, p_source_ip, p_event_id, p_source_ts)
  on conflict (receiver, event_id) where event_id is not null do nothing
  returning id into v_id;
  perform pg_notify('bitrix_sync_webhooks', p_receiver);
  return v_id;
end $$;
comment on function bitrix_sync.record_webhook(text, integer, text, inet, text, timestamptz) is
  'Durable insert of an accepted webhook (status received). With a stable event_id a duplicate is dropped and null is returned.';

create or replace function bitrix_sync.claim_webhooks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds',
  p_receiver text default null
) returns setof bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_cand record;
  v_row bitrix_sync.webhook_inbox;
  v_claimed integer := 0;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover.
  if not bitrix_sync.cutover_performed() then
    return;
  end if;
  for v_cand in
    select w.id, w.receiver, w.entity_id, w.status from bitrix_sync.webhook_inbox w
     where (p_receiver is null or w.receiver = p_receiver)
       and ((w.status in ('received', 'retry_wait') and w.next_attempt_at <= now())
            or (w.status = 'processing' and w.locked_until < now()))
     order by w.id
     limit p_limit * 4
     for update skip locked
  loop
    exit when v_claimed >= p_limit;
    -- Another claimer that has an event of this entity in flight holds this lock until it commits.
    -- Skipping instead of waiting on its uncommitted index entry avoids a lock cycle between two
    -- claimers that picked events of the same two entities in crossed order (a deadlock error).
    continue when not pg_try_advisory_xact_lock(hashtext('bitrix_sync.webhook_inbox'),
                                                hashtext(v_cand.receiver || ':' || v_cand.entity_id));
    begin
      -- The status test skips candidates this loop has just coalesced into an earlier one.
      update bitrix_sync.webhook_inbox
         set status = 'processing', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
             locked_until = now() + p_lease, attempt_count = attempt_count + 1, status_at = now()
       where id = v_cand.id and status = v_cand.status
      returning * into v_row;
    exception when unique_violation then
      -- Another event of this entity is being processed: leave this one for later.
      continue;
    end;
    continue when not found;
    -- The other pending events of the entity are covered by this one read.
    update bitrix_sync.webhook_inbox o
       set status = 'coalesced', coalesced_into = v_row.id, status_at = now()
     where o.receiver = v_row.receiver and o.entity_id = v_row.entity_id and o.status = 'received'
       and o.id <> v_row.id
       and o.id in (select x.id from bitrix_sync.webhook_inbox x
                     where x.receiver = v_row.receiver and x.entity_id = v_row.entity_id and x.status = 'received'
                     for update skip locked);
    v_claimed := v_claimed + 1;
    return next v_row;
  end loop;
end $$;
comment on function bitrix_sync.claim_webhooks(text, integer, interval, text) is
  'Leases due inbox events, at most one per entity (enforced by a partial unique index), and coalesces the entity''s other received events into the claimed one. Returns nothing before perform_cutover(): the receivers keep recording, the events wait.';

create or replace function bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_outcome);
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = p_outcome, processed_at = now(), status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'processing' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced', processed_at = now(), status_at = now()
   where coalesced_into = p_id and status = 'coalesced';
  return v_row;
end $$;
comment on function bitrix_sync.complete_webhook(bigint, uuid, text) is
  'processing -> processed with a safe outcome code; the events coalesced into it are processed too. Refuses stale tokens (BS001).';

create or replace function bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  update bitrix_sync.webhook_inbox
     set status = 'dead_letter', last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced_into_dead_letter', processed_at = now(), status_at = now()
   where coalesced_into = p_row.id and status = 'coalesced';
  -- An event is first attempted when it arrives: the receiver wakes the processor at once.
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, operation, error_code, attempt_count, first_attempt_at, deadline_at)
  values ('webhook', v_row.id::text, 'webhook.' || v_row.receiver, p_error_code, v_row.attempt_count,
          v_row.received_at, bitrix_sync._retry_deadline(v_row.received_at));
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox, text) is
  'Internal: moves a held event to dead_letter with its coalesced events and writes the technical DLQ row (first attempt = received_at).';

create or replace function bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from bitrix_sync.webhook_inbox
   where id = p_id and status = 'processing' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.received_at) then
    return bitrix_sync._dead_letter_webhook_row(v_row, 'retry_horizon_exceeded');
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_webhook(bigint, uuid, text, interval) is
  'processing -> retry_wait; coalesced events stay attached and finish with it. When the retry would fall past the horizon (received_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead; the returned status says which. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from bitrix_sync.webhook_inbox
   where id = p_id and status = 'processing' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  return bitrix_sync._dead_letter_webhook_row(v_row, p_error_code);
end $$;
comment on function bitrix_sync.dead_letter_webhook(bigint, uuid, text) is
  'processing -> dead_letter with a technical DLQ row. Reconciliation still repairs the Contact later. Refuses stale tokens (BS001).';
-- <<< sql/webhooks.sql
-- >>> sql/reconciliation.sql (included)
-- Reconciliation runs (§10.2, §10.3): the cursor row of each job is its lock. A run is claimed when
-- it is due (the interval passed, or forced) and no other run holds the cursor; a run still marked
-- running after reconcile.lease_sec is taken to have died. The lease token fences the finish, and
-- the watermark moves only when a whole run succeeded.

create or replace function bitrix_sync.claim_reconciliation_cursor(
  p_job_type text, p_interval interval, p_force boolean default false, p_overlap interval default null
) returns setof bitrix_sync.reconciliation_cursors
language plpgsql as $$
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
  select * into v_row from bitrix_sync.reconciliation_cursors where job_type = p_job_type for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= now() - v_lease then
    return; -- a run is in progress
  end if;
  if not coalesce(p_force, false) and v_row.last_run_started_at > now() - p_interval then
    return; -- not due yet
  end if;
  update bitrix_sync.reconciliation_cursors
     set last_run_started_at = now(), last_run_status = 'running', lease_token = gen_random_uuid(),
         overlap = coalesce(p_overlap, overlap)
   where job_type = p_job_type
  returning * into v_row;
  return next v_row;
end $$;
comment on function bitrix_sync.claim_reconciliation_cursor(text, interval, boolean, interval) is
  'Starts a run of job p_job_type when it is due (last start at least p_interval ago, or p_force) and no live run holds the cursor (a running run older than reconcile.lease_sec is taken over). Returns the cursor with a new lease_token and last_run_started_at = now(), the next watermark; no row when nothing is to be run, and none before perform_cutover().';

create or replace function bitrix_sync.finish_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  update bitrix_sync.reconciliation_cursors
     set watermark = last_run_started_at, last_success_at = now(), last_run_status = 'succeeded',
         last_error_code = null, last_scanned = p_scanned, last_updated = p_updated,
         last_recovered = coalesce(p_recovered, last_recovered),
         -- Smoothed usual value of recovered Contacts, for the spike alert of §10.2.
         recovered_baseline = case when p_recovered is null then recovered_baseline
                                   else coalesce(recovered_baseline * 0.8 + p_recovered * 0.2, p_recovered) end,
         lease_token = null
   where job_type = p_job_type and last_run_status = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_reconciliation_run(text, uuid, integer, integer, integer) is
  'running -> succeeded: the watermark moves to the run''s start, the counts are recorded (p_recovered also feeds the spike baseline). Refuses a run whose lease was taken over (BS001).';

create or replace function bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text)
returns bitrix_sync.reconciliation_cursors
language plpgsql as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.reconciliation_cursors
     set last_run_status = 'failed', last_error_code = p_error_code, lease_token = null
   where job_type = p_job_type and last_run_status = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fail_reconciliation_run(text, uuid, text) is
  'running -> failed with a safe code; the watermark stays, so the next run reads the same window again. Refuses a run whose lease was taken over (BS001).';
-- <<< sql/reconciliation.sql
-- >>> sql/rebind.sql (included)
-- Audited rebind request (§5.4): an admin asks to move a user's link to another Contact. The
-- procedure records the request and starts a contact.rebind workflow; the mapping itself changes
-- only when the workflow has updated both Contacts. The runtime role only reads rebind requests:
-- the functions a rebind workflow calls under its lease are security definer, so the audit columns
-- (reason, operator) are out of its reach.

create or replace function bitrix_sync.request_bitrix_contact_rebind(
  user_id uuid, target_b24_id text, reason text, operator_id text
) returns uuid
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_current bitrix_sync.entity_external_mapping;
  v_request_id uuid;
  v_workflow_id uuid;
  v_user_id constant uuid := request_bitrix_contact_rebind.user_id;
  v_target constant text := btrim(request_bitrix_contact_rebind.target_b24_id);
begin
  if v_user_id is null or v_target is null or v_target !~ '^[1-9][0-9]{0,17}$' then
    raise exception 'target_b24_id must be a Bitrix24 Contact ID (digits only) and user_id is required'
      using errcode = 'BS004', hint = 'Example: select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''12345'', ''duplicate merged by CRM team'', ''ops:ivanov'');';
  end if;
  if reason is null or length(btrim(reason)) < 3 or operator_id is null or length(btrim(operator_id)) = 0 then
    raise exception 'a reason (3 to 500 characters) and an operator_id are required for the audit'
      using errcode = 'BS004', hint = 'Say why the link is wrong and who you are.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = v_user_id and u.record_status = 'active') then
    raise exception 'user % does not exist or is not active', v_user_id
      using errcode = 'BS005', hint = 'Only active users are linked to Contacts.';
  end if;

  -- 1. lock the user's current active mapping (there may be none).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_user_id and m.status = 'active'
   for update;
  if found and v_current.external_id = v_target then
    raise exception 'user % is already linked to Contact %', v_user_id, v_target
      using errcode = 'BS006', hint = 'Nothing to do.';
  end if;
  -- 2. the target must not be actively linked to another user.
  perform 1 from bitrix_sync.entity_external_mapping m
   where m.external_entity_type = 'contact' and m.external_id = v_target and m.status = 'active'
   for update;
  if found then
    raise exception 'Contact % is actively linked to another user', v_target
      using errcode = 'BS006',
            hint = 'Resolve that user''s link first (deactivate or rebind it); a Contact cannot serve two active users.';
  end if;
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.user_id = v_user_id and r.status in ('requested', 'in_progress')) then
    raise exception 'a rebind of user % is already in progress', v_user_id
      using errcode = 'BS007', hint = 'Wait for it to finish (bitrix_sync.status views), then ask again.';
  end if;
  -- Two open requests for one target would race for the same Contact; the second would fail late,
  -- after both Contacts were read and written.
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.target_contact_id = v_target and r.status in ('requested', 'in_progress')) then
    raise exception 'Contact % is already the target of an open rebind request', v_target
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end if;
  if exists (select 1 from bitrix_sync.workflow_instances w
              where w.user_id = v_user_id and w.state not in ('succeeded', 'failed', 'cancelled')) then
    raise exception 'user % has a sync workflow running', v_user_id
      using errcode = 'BS007', hint = 'Retry when it has finished; a user has one workflow at a time.';
  end if;

  -- 3. the request and its workflow; the mapping is untouched (4).
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, contact_id, step_data)
  values ('contact.rebind', 'contact.rebind', v_user_id, v_target,
          jsonb_build_object('previous_contact_id', v_current.external_id, 'target_contact_id', v_target))
  returning id into v_workflow_id;
  begin
    insert into bitrix_sync.rebind_requests (user_id, previous_contact_id, target_contact_id, reason, operator_id, workflow_id)
    values (v_user_id, v_current.external_id, v_target, btrim(reason), btrim(operator_id), v_workflow_id)
    returning id into v_request_id;
  exception when unique_violation then
    -- A concurrent request for the same target (or user) committed between the checks and here.
    raise exception 'Contact % or user % already has an open rebind request', v_target, v_user_id
      using errcode = 'BS009',
            hint = 'Wait until that request has finished (bitrix_sync.rebind_requests), then ask again; a Contact serves one user.';
  end;
  perform pg_notify('bitrix_sync_workflows', '');
  return v_request_id;
end $$;
comment on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) is
  'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user or already the target of an open request (BS009), records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';

create or replace function bitrix_sync._rebind_request_of(p_workflow_id uuid) returns bitrix_sync.rebind_requests
language plpgsql as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_row from bitrix_sync.rebind_requests where workflow_id = p_workflow_id for update;
  if not found then
    raise exception 'workflow % has no rebind request', p_workflow_id
      using errcode = 'BS005', hint = 'A contact.rebind workflow is started only by request_bitrix_contact_rebind().';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._rebind_request_of(uuid) is
  'Internal: the rebind request a contact.rebind workflow serves, locked; BS005 when there is none.';

create or replace function bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status = 'in_progress' then
    -- The workflow began this pass again (a Contact vanished mid-way): already started.
    return v_row;
  end if;
  if v_row.status <> 'requested' then
    raise exception 'rebind request % is %, it cannot start', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished; ask again with request_bitrix_contact_rebind().';
  end if;
  update bitrix_sync.rebind_requests set status = 'in_progress' where id = v_row.id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.start_rebind_request(uuid, uuid) is
  'requested -> in_progress when the contact.rebind workflow starts reading the Contacts (a request already in progress is returned as it is). Fenced by the workflow''s lease token (BS001). Security definer: the runtime role only reads rebind requests.';

create or replace function bitrix_sync.fail_rebind_request(p_workflow_id uuid, p_lease_token uuid, p_failure_code text)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._check_code(p_failure_code);
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is %, it cannot fail', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished.';
  end if;
  update bitrix_sync.rebind_requests
     set status = 'failed', failure_code = p_failure_code, completed_at = now()
   where id = v_row.id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.fail_rebind_request(uuid, uuid, text) is
  'requested | in_progress -> failed with a safe failure code (target bound to another user, not found, CRM failure, user not eligible). The mapping is untouched. Fenced by the workflow''s lease token (BS001). Security definer, as start_rebind_request.';

create or replace function bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
  v_current bitrix_sync.entity_external_mapping;
begin
  v_wf := bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status <> 'in_progress' then
    raise exception 'rebind request % is %, not in_progress', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'start_rebind_request() first; a finished request stays finished.';
  end if;
  -- Both Contacts are updated: the link moves, the request ends and the conflicts that led to it are
  -- resolved in one transaction (§5.4, §11).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_wf.user_id and m.status = 'active'
   for update;
  if found then
    perform bitrix_sync.close_mapping(v_current.id, 'rebound', p_workflow_id);
  end if;
  perform bitrix_sync.open_mapping(v_wf.user_id, v_row.target_contact_id, p_workflow_id);
  update bitrix_sync.rebind_requests set status = 'succeeded', completed_at = now()
   where id = v_row.id
  returning * into v_row;
  perform bitrix_sync._resolve_conflict_alerts(v_wf.user_id);
  return v_row;
end $$;
comment on function bitrix_sync.complete_rebind(uuid, uuid) is
  'in_progress -> succeeded for the request of a contact.rebind workflow, in one call: closes the user''s active mapping (rebound), opens the link to the target Contact, and resolves the user''s open conflict alerts. Fenced by the workflow''s lease token (BS001); BS006 if the target is linked meanwhile. Security definer, as start_rebind_request.';
-- <<< sql/rebind.sql
-- >>> sql/receiver.sql (included)
-- Robot webhook receivers (§10.1, docs/receivers.md): the statement the receivers run. The HTTP
-- layer has already checked the token, the form and the portal identity; accept_webhooks() checks
-- what only the database knows (the alert smart process's entityTypeId, a hot setting) and inserts
-- the inbox rows, all in the statement's own transaction. The receiver sends the requests that
-- arrive together as one call (one round trip and one commit for all of them) and answers each
-- only after that commit; a refused event gets a refusal code and leaves no row.
--
-- Why grouped: PostgreSQL serialises the commits of transactions that NOTIFY (one global lock held
-- across the WAL flush). One row per transaction through record_webhook() (insert + NOTIFY)
-- measured 545 accepted requests/s against 2 600/s for a plain insert (pgbench, 16 clients, 2
-- cores); an add_job with a job_key per request, 262/s. So the wake-up for the sync loop's LISTEN
-- (bitrix_sync_webhooks, as record_webhook sends it) is sent once per call and receiver, whatever
-- the number of rows. The loop's fallback poll covers a lost wake-up (§8).
--
-- Refusal codes (accept_webhooks) and errors (accept_webhook, for psql): entity_type / BS020 the
-- entity type is not the receiver's (the HTTP layer answers 400), entity_id / BS004 the entity ID is
-- not a numeric ID (400), alert_entity_type_unset / BS021 alerts.entity_type_id is not set (503),
-- alert_config_invalid / BS023 it is set but unusable (503), unknown_receiver / BS022 a bug in the
-- caller (503). Each is decided per event, so one event or one receiver never costs the others of
-- the call: the checks below cover every CHECK of webhook_inbox, so an insert cannot fail on the
-- event's data. Only BS004 for arrays of different lengths (no event can be told apart) fails the
-- whole call, as does the database itself failing.

create or replace function bitrix_sync.accept_webhooks(
  p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[]
) returns table (ord integer, inbox_id bigint, refusal text)
language plpgsql as $$
declare
  v_n integer := coalesce(cardinality(p_receivers), 0);
  v_alert_type integer;
  v_alert_refusal text;
  v_expected integer;
  v_contact boolean := false;
  v_alert boolean := false;
begin
  if coalesce(cardinality(p_entity_type_ids), 0) <> v_n or coalesce(cardinality(p_entity_ids), 0) <> v_n
     or coalesce(cardinality(p_source_ips), 0) <> v_n or v_n > 1000 then
    raise exception 'accept_webhooks needs four arrays of one length, at most 1000'
      using errcode = 'BS004', hint = 'Pass receiver, entity type, entity ID and source IP per event, in that order.';
  end if;
  if 'alert' = any(p_receivers) then
    begin
      v_alert_type := bitrix_sync.alert_entity_type_id();
      if v_alert_type is null then
        v_alert_refusal := 'alert_entity_type_unset';
      end if;
    exception when others then
      -- A broken alert setting stops the alert receiver only; Contact events of the call go on.
      v_alert_refusal := 'alert_config_invalid';
    end;
  end if;
  for i in 1 .. v_n loop
    ord := i;
    inbox_id := null;
    refusal := null;
    v_expected := null;
    if p_receivers[i] = 'contact' then
      v_expected := 3;
    elsif p_receivers[i] = 'alert' then
      v_expected := v_alert_type;
      refusal := v_alert_refusal;
    else
      refusal := 'unknown_receiver';
    end if;
    if refusal is null and p_entity_type_ids[i] is distinct from v_expected then
      refusal := 'entity_type';
    end if;
    if refusal is null and (p_entity_ids[i] is null or p_entity_ids[i] !~ '^[1-9][0-9]{0,17}$') then
      refusal := 'entity_id';
    end if;
    if refusal is null then
      insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip)
      values (p_receivers[i], p_entity_type_ids[i], p_entity_ids[i], p_source_ips[i])
      returning id into inbox_id;
      if p_receivers[i] = 'contact' then
        v_contact := true;
      else
        v_alert := true;
      end if;
    end if;
    return next;
  end loop;
  -- One wake-up per call and receiver (not per row, see above) for the sync loop's LISTEN.
  if v_contact then
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
  if v_alert then
    perform pg_notify('bitrix_sync_webhooks', 'alert');
  end if;
end $$;
comment on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[]) is
  'Receiver entry point (§10.1): for each event (parallel arrays), checks the receiver, the entity type (3 for contact, alerts.entity_type_id for alert) and the entity ID and inserts an inbox row; returns per event its 1-based ord and the inbox id, or a refusal (entity_type, entity_id, alert_entity_type_unset, alert_config_invalid, unknown_receiver) and no row. One event''s refusal never fails another''s.';

create or replace function bitrix_sync.accept_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null
) returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row record;
begin
  select * into v_row
    from bitrix_sync.accept_webhooks(array[p_receiver], array[p_entity_type_id], array[p_entity_id], array[p_source_ip]);
  case v_row.refusal
    when 'alert_entity_type_unset' then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not set'
        using errcode = 'BS021',
              hint = 'Set the smart process entityTypeId with propose_settings(''{"alerts.entity_type_id": <id>}'', ...) and activate it.';
    when 'alert_config_invalid' then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not usable'
        using errcode = 'BS023',
              hint = 'Propose the entityTypeId as a whole number with propose_settings(), then validate and activate it.';
    when 'unknown_receiver' then
      raise exception 'unknown webhook receiver %', p_receiver
        using errcode = 'BS022', hint = 'Receivers are contact and alert.';
    when 'entity_id' then
      raise exception 'the entity ID must be a numeric Bitrix24 ID'
        using errcode = 'BS004', hint = 'Pass the ID from document_id[2], e.g. ''4711''.';
    when 'entity_type' then
      raise exception 'the % receiver does not accept entity type %', p_receiver, p_entity_type_id
        using errcode = 'BS020',
              hint = 'The robot belongs to another document type or smart process; check the robot and alerts.entity_type_id.';
    else
      return v_row.inbox_id;
  end case;
end $$;
comment on function bitrix_sync.accept_webhook(text, integer, text, inet) is
  'One event through accept_webhooks(), for an operator with psql re-recording a robot call that was lost (the robot does not retry): returns the inbox id; BS020 wrong entity type, BS004 malformed ID, BS021/BS023 alert receiver not configured or unusable, BS022 unknown receiver; nothing is written then. Security definer: the admin role has no table rights.';
-- <<< sql/receiver.sql
-- >>> sql/limiter.sql (included)
-- CRM rate limiter (§8, §9), shared by every replica through PostgreSQL. The TypeScript side
-- (src/crm/limiter.ts) calls acquire_crm_request() before each HTTP request and
-- release_crm_request() after it; replies feed note_rate_limited(), note_method_blocked() and
-- note_crm_operating(). Settings (rate, burst, in-flight cap) come in as parameters, read by the
-- caller from bitrix_sync.active_settings(). Re-runnable. Errors: SQLSTATE BS010..BS012. Who may call
-- what: sql/privileges.sql.

create or replace function bitrix_sync._check_limiter_name(p_what text, p_value text) returns void
language plpgsql immutable as $$
begin
  if p_value is null or length(p_value) not between 1 and 200 then
    raise exception 'limiter % must be a non-empty name of at most 200 characters', p_what
      using errcode = 'BS012', hint = 'Pass the portal host as the bucket and a REST method name as the method.';
  end if;
end $$;
comment on function bitrix_sync._check_limiter_name(text, text) is
  'Refuses an empty or oversized bucket/holder/method name with BS012.';

create or replace function bitrix_sync.acquire_crm_request(
  p_bucket text,
  p_holder text,
  p_refill_per_sec double precision,
  p_burst integer,
  p_max_in_flight integer,
  p_slot_ttl_ms integer,
  p_recovery_per_sec double precision default 0.05
) returns table (granted boolean, slot_id uuid, wait_ms integer, tokens double precision,
                 rate double precision, in_flight integer, decided_at timestamptz)
language plpgsql as $$
#variable_conflict use_column
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
  v_rate double precision;
  v_tokens double precision;
  v_in_flight integer;
  v_next_expiry timestamptz;
  v_slot uuid;
  v_wait integer;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('holder', p_holder);
  if p_refill_per_sec is null or p_refill_per_sec <= 0 or p_burst is null or p_burst < 1
     or p_max_in_flight is null or p_max_in_flight < 1 or p_slot_ttl_ms is null or p_slot_ttl_ms < 1
     or p_recovery_per_sec is null or p_recovery_per_sec < 0 then
    raise exception 'limiter settings out of range: refill %, burst %, max in flight %, slot ttl % ms',
      p_refill_per_sec, p_burst, p_max_in_flight, p_slot_ttl_ms
      using errcode = 'BS010',
            hint = 'Check limiter.refill_per_sec (> 0), limiter.burst (>= 1) and limiter.max_in_flight (>= 1) in bitrix_sync.settings.';
  end if;

  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (p_bucket, p_burst, clock_timestamp())
  on conflict (bucket) do nothing;
  -- One row lock serialises every replica's decision for this bucket; the clock is read after it.
  select * into strict v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  v_now := clock_timestamp();

  v_factor := least(1.0, v_row.rate_factor
                        + p_recovery_per_sec * greatest(0, extract(epoch from v_now - v_row.rate_changed_at)));
  v_rate := p_refill_per_sec * v_factor;
  v_tokens := least(p_burst::double precision,
                    v_row.tokens + v_rate * greatest(0, extract(epoch from v_now - v_row.refilled_at)));

  delete from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket and s.expires_at <= v_now;
  select count(*)::integer, min(s.expires_at) into v_in_flight, v_next_expiry
    from bitrix_sync.crm_inflight_slots s where s.bucket = p_bucket;

  if v_row.throttled_until is not null and v_row.throttled_until > v_now then
    v_wait := ceil(extract(epoch from v_row.throttled_until - v_now) * 1000)::integer;
  elsif v_in_flight >= p_max_in_flight then
    -- Slots are normally released long before they expire: suggest polling soon.
    v_wait := least(100, greatest(1, ceil(extract(epoch from v_next_expiry - v_now) * 1000)))::integer;
  elsif v_tokens < 1 then
    v_wait := greatest(1, ceil((1 - v_tokens) / v_rate * 1000))::integer;
  else
    v_tokens := v_tokens - 1;
    insert into bitrix_sync.crm_inflight_slots as s (bucket, holder, acquired_at, expires_at)
    values (p_bucket, p_holder, v_now, v_now + make_interval(secs => p_slot_ttl_ms / 1000.0))
    returning s.slot_id into v_slot;
    v_in_flight := v_in_flight + 1;
  end if;

  update bitrix_sync.crm_rate_buckets b
     set tokens = greatest(0, v_tokens), refilled_at = v_now, rate_factor = v_factor,
         rate_changed_at = v_now, updated_at = v_now
   where b.bucket = p_bucket;

  return query select v_slot is not null, v_slot, coalesce(v_wait, 0), v_tokens, v_rate, v_in_flight, v_now;
end $$;
comment on function bitrix_sync.acquire_crm_request(text, text, double precision, integer, integer, integer, double precision) is
  'Takes one token and one in-flight slot for an HTTP request to the portal, or says how long to wait (wait_ms). decided_at is the server time of the decision. Shared by every replica (§8).';

create or replace function bitrix_sync.release_crm_request(p_slot_id uuid) returns boolean
language plpgsql as $$
begin
  delete from bitrix_sync.crm_inflight_slots s where s.slot_id = p_slot_id;
  return found;
end $$;
comment on function bitrix_sync.release_crm_request(uuid) is
  'Frees an in-flight slot when its request has a reply or failed. false when the slot had already expired.';

create or replace function bitrix_sync.note_rate_limited(
  p_bucket text,
  p_decrease double precision default 0.5,
  p_min_factor double precision default 0.1,
  p_cooldown_ms integer default 1000,
  p_recovery_per_sec double precision default 0.05
) returns double precision
language plpgsql as $$
declare
  v_now timestamptz;
  v_row bitrix_sync.crm_rate_buckets;
  v_factor double precision;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if p_decrease is null or p_decrease <= 0 or p_decrease > 1 or p_min_factor is null or p_min_factor <= 0
     or p_min_factor > 1 or p_cooldown_ms is null or p_cooldown_ms < 0 or p_recovery_per_sec is null
     or p_recovery_per_sec < 0 then
    raise exception 'rate cut parameters out of range: decrease %, min factor %, cool-down % ms',
      p_decrease, p_min_factor, p_cooldown_ms
      using errcode = 'BS010', hint = 'decrease and min factor are in (0, 1]; the cool-down is not negative.';
  end if;
  insert into bitrix_sync.crm_rate_buckets as b (bucket, tokens, refilled_at)
  values (p_bucket, 0, clock_timestamp())
  on conflict (bucket) do nothing;
  select * into strict v_row from bitrix_sync.crm_rate_buckets b where b.bucket = p_bucket for update;
  v_now := clock_timestamp();
  v_factor := least(1.0, v_row.rate_factor
                        + p_recovery_per_sec * greatest(0, extract(epoch from v_now - v_row.rate_changed_at)));
  -- Both in-flight requests often come back refused together: cut once per cool-down window.
  if v_row.throttled_until is not null and v_row.throttled_until > v_now then
    return v_row.rate_factor;
  end if;
  v_factor := greatest(p_min_factor, v_factor * p_decrease);
  update bitrix_sync.crm_rate_buckets b
     set rate_factor = v_factor, rate_changed_at = v_now, tokens = 0, refilled_at = v_now,
         throttled_until = v_now + make_interval(secs => p_cooldown_ms / 1000.0),
         rate_limited_count = b.rate_limited_count + 1, updated_at = v_now
   where b.bucket = p_bucket;
  return v_factor;
end $$;
comment on function bitrix_sync.note_rate_limited(text, double precision, double precision, integer, double precision) is
  'QUERY_LIMIT_EXCEEDED: empties the bucket, pauses it for the cool-down and multiplies the rate by p_decrease; acquire_crm_request() lets it climb back linearly. Returns the new rate factor.';

create or replace function bitrix_sync.note_method_blocked(
  p_bucket text, p_method text, p_until timestamptz default null
) returns timestamptz
language plpgsql as $$
declare
  v_now timestamptz := clock_timestamp();
  v_reset timestamptz;
  v_old timestamptz;
  v_until timestamptz;
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  perform bitrix_sync._check_limiter_name('method', p_method);
  select m.operating_reset_at, m.blocked_until into v_reset, v_old
    from bitrix_sync.crm_method_blocks m where m.bucket = p_bucket and m.method = p_method for update;
  -- The refusal carries no timing: use the caller's estimate, the last reset time a reply of this
  -- method reported, or a minute, whichever is latest (reference §2).
  v_until := greatest(coalesce(p_until, v_now + interval '1 minute'),
                      case when v_reset > v_now then v_reset end,
                      case when v_old > v_now then v_old end);
  insert into bitrix_sync.crm_method_blocks as m (bucket, method, blocked_until, updated_at)
  values (p_bucket, p_method, v_until, v_now)
  on conflict (bucket, method) do update set blocked_until = excluded.blocked_until, updated_at = excluded.updated_at;
  return v_until;
end $$;
comment on function bitrix_sync.note_method_blocked(text, text, timestamptz) is
  'OPERATION_TIME_LIMIT: blocks one REST method (only that one) until the later of p_until and its last operating_reset_at. Returns the end of the block.';

create or replace function bitrix_sync.note_crm_operating(
  p_bucket text, p_methods text[], p_operating double precision[], p_reset_at timestamptz[]
) returns void
language plpgsql as $$
declare
  v_now timestamptz := clock_timestamp();
begin
  perform bitrix_sync._check_limiter_name('bucket', p_bucket);
  if coalesce(cardinality(p_methods), 0) <> coalesce(cardinality(p_operating), 0)
     or coalesce(cardinality(p_methods), 0) <> coalesce(cardinality(p_reset_at), 0) then
    raise exception 'operating samples must have one method, one operating time and one reset time each'
      using errcode = 'BS011', hint = 'Pass three arrays of the same length.';
  end if;
  for i in 1 .. coalesce(cardinality(p_methods), 0) loop
    perform bitrix_sync._check_limiter_name('method', p_methods[i]);
    insert into bitrix_sync.crm_method_blocks as m (bucket, method, operating, operating_reset_at, updated_at)
    values (p_bucket, p_methods[i], greatest(0, p_operating[i]), p_reset_at[i], v_now)
    on conflict (bucket, method) do update
      set operating = excluded.operating,
          operating_reset_at = coalesce(excluded.operating_reset_at, m.operating_reset_at),
          updated_at = excluded.updated_at;
  end loop;
end $$;
comment on function bitrix_sync.note_crm_operating(text, text[], double precision[], timestamptz[]) is
  'Records time.operating and time.operating_reset_at per REST method from replies, so a later OPERATION_TIME_LIMIT knows when the method frees.';

create or replace function bitrix_sync.blocked_crm_methods(p_bucket text)
returns table (method text, blocked_until timestamptz)
language sql stable as $$
  select m.method, m.blocked_until
    from bitrix_sync.crm_method_blocks m
   where m.bucket = p_bucket and m.blocked_until > clock_timestamp()
   order by m.method
$$;
comment on function bitrix_sync.blocked_crm_methods(text) is
  'REST methods blocked by OPERATION_TIME_LIMIT right now, with the end of each block. The pump holds their commands back.';

create or replace function bitrix_sync.crm_limiter_state(p_bucket text)
returns table (tokens double precision, rate_factor double precision, in_flight integer,
               throttled_until timestamptz, rate_limited_count bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select b.tokens, b.rate_factor,
         (select count(*)::integer from bitrix_sync.crm_inflight_slots s
           where s.bucket = b.bucket and s.expires_at > clock_timestamp()),
         case when b.throttled_until > clock_timestamp() then b.throttled_until end,
         b.rate_limited_count
    from bitrix_sync.crm_rate_buckets b
   where b.bucket = p_bucket
$$;
comment on function bitrix_sync.crm_limiter_state(text) is
  'Limiter state for /internal/sync/v1/status (§14): tokens as last stored, rate factor, live in-flight slots, cool-down end. Security definer so the admin role can read it without table grants.';
-- <<< sql/limiter.sql
-- >>> sql/row_guards.sql (included)
-- Row guards beyond the state edges (§6.3, §5.4, §12.3, §17; issue 10): a row is born in its
-- machine's initial state, and the columns that identify a row or record who did what never change.
-- Triggers, so they hold for every writer: the runtime role (whose grants already leave these
-- columns out, sql/privileges.sql), the admin functions and the schema owner's own accidents.
-- Tests and repairs that must start a row elsewhere turn triggers off explicitly
-- (session_replication_role = replica, superuser only). Re-runnable.

create or replace function bitrix_sync.tg__refuse_insert_state() returns trigger
language plpgsql as $$
-- TG_ARGV[0]: the initial state in words. The trigger's WHEN clause decides; this only reports.
begin
  raise exception 'a new row of %.% must start %', tg_table_schema, tg_table_name, tg_argv[0]
    using errcode = 'BS030',
          hint = 'Create rows through their bitrix_sync function; they move on only along bitrix_sync.state_edges (docs/state-machines.md).';
end $$;
comment on function bitrix_sync.tg__refuse_insert_state() is
  'BEFORE INSERT guard, fired by its WHEN clause when a row is inserted in a state other than its machine''s initial one (or already leased or finished). SQLSTATE BS030.';

create or replace function bitrix_sync.tg__refuse_immutable_change() returns trigger
language plpgsql as $$
-- TG_ARGV: the columns that never change.
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_changed text;
begin
  select string_agg(c, ', ' order by c) into v_changed
    from unnest(tg_argv) c
   where v_old -> c is distinct from v_new -> c;
  if v_changed is not null then
    raise exception '%.% never changes %', tg_table_schema, tg_table_name, v_changed
      using errcode = 'BS031',
            hint = 'These columns identify the row or record its audit. Open a new row instead: a new mapping (close_mapping, open_mapping), a new rebind request, a new settings version.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg__refuse_immutable_change() is
  'BEFORE UPDATE guard: refuses a change of any column named in TG_ARGV (identity and audit columns). SQLSTATE BS031.';

create or replace function bitrix_sync.tg_settings_versions__freeze() returns trigger
language plpgsql as $$
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_allowed text[];
  v_changed text;
begin
  -- What each step of the settings machine may write; everything else is history once written.
  v_allowed := case
    when old.status = 'draft' and new.status = 'draft' then array['settings_values', 'note']
    when old.status = 'draft' then array['status', 'settings_values', 'validation_errors', 'validated_at']
    when old.status = 'validated' and new.status = 'active' then array['status', 'activated_by', 'activated_at']
    when old.status = 'active' and new.status = 'superseded' then array['status', 'superseded_at']
    -- Any other status change is judged by the guard trigger _100_guard_status.
    else array['status']
  end;
  select string_agg(k, ', ' order by k) into v_changed
    from jsonb_object_keys(v_new) k
   where k <> all (v_allowed) and v_old -> k is distinct from v_new -> k;
  if v_changed is not null then
    raise exception 'settings version % is %: % can no longer change', old.version, old.status, v_changed
      using errcode = 'BS031',
            hint = 'A version''s values and audit are history once it leaves draft. Propose a new version with propose_settings().';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg_settings_versions__freeze() is
  'BEFORE UPDATE guard on settings_versions: values and note change only while a version is a draft; validation, activation and supersession each write only their own audit columns; created_by, based_on, rollback_of never change. SQLSTATE BS031.';

-- Initial states (the [*] arrows of docs/state-machines.md). WHEN keeps the hot inserts (inbox,
-- commands, queue) free of a PL/pgSQL call.
drop trigger if exists _110_initial_state on han_app.sync_queue;
create trigger _110_initial_state before insert on han_app.sync_queue
  for each row when (new.status <> 'pending' or new.lease_token is not null or new.completed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('pending, without a lease');
comment on trigger _110_initial_state on han_app.sync_queue is 'Intents are recorded pending (§6.1).';

drop trigger if exists _110_initial_state on bitrix_sync.workflow_instances;
create trigger _110_initial_state before insert on bitrix_sync.workflow_instances
  for each row when (new.state <> 'created' or new.lease_token is not null or new.finished_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('created, without a lease');
comment on trigger _110_initial_state on bitrix_sync.workflow_instances is 'Workflows start created (§7.1).';

drop trigger if exists _110_initial_state on bitrix_sync.crm_commands;
create trigger _110_initial_state before insert on bitrix_sync.crm_commands
  for each row when (new.status <> 'pending' or new.lease_token is not null or new.sent_at is not null
                     or new.completed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('pending, never sent, without a lease');
comment on trigger _110_initial_state on bitrix_sync.crm_commands is 'Commands are issued pending (§7.2).';

drop trigger if exists _110_initial_state on bitrix_sync.webhook_inbox;
create trigger _110_initial_state before insert on bitrix_sync.webhook_inbox
  for each row when (new.status <> 'received' or new.lease_token is not null or new.coalesced_into is not null
                     or new.processed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('received, without a lease');
comment on trigger _110_initial_state on bitrix_sync.webhook_inbox is 'Webhooks are recorded received (§7.3).';

drop trigger if exists _110_initial_state on bitrix_sync.entity_external_mapping;
create trigger _110_initial_state before insert on bitrix_sync.entity_external_mapping
  for each row when (new.status <> 'active')
  execute function bitrix_sync.tg__refuse_insert_state('active');
comment on trigger _110_initial_state on bitrix_sync.entity_external_mapping is 'A link is opened active; it is closed or broken only by close_mapping (§6.3).';

drop trigger if exists _110_initial_state on bitrix_sync.rebind_requests;
create trigger _110_initial_state before insert on bitrix_sync.rebind_requests
  for each row when (new.status <> 'requested' or new.completed_at is not null or new.failure_code is not null)
  execute function bitrix_sync.tg__refuse_insert_state('requested');
comment on trigger _110_initial_state on bitrix_sync.rebind_requests is 'Rebind requests start requested (§5.4).';

drop trigger if exists _110_initial_state on bitrix_sync.business_alerts;
create trigger _110_initial_state before insert on bitrix_sync.business_alerts
  for each row when (new.status <> 'open' or new.crm_sync_status <> 'pending' or new.closed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('open, with its CRM mirror pending');
comment on trigger _110_initial_state on bitrix_sync.business_alerts is 'Alerts open, and are mirrored into the CRM afterwards (§11).';

drop trigger if exists _110_initial_state on bitrix_sync.settings_versions;
create trigger _110_initial_state before insert on bitrix_sync.settings_versions
  for each row when (new.status <> 'draft' or new.validation_errors is not null or new.validated_at is not null
                     or new.activated_by is not null or new.activated_at is not null or new.superseded_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('draft, neither validated nor activated');
comment on trigger _110_initial_state on bitrix_sync.settings_versions is 'A settings version starts as a draft and is validated before it can be activated (§12.3).';

-- Identity and audit columns.
drop trigger if exists _120_immutable on bitrix_sync.entity_external_mapping;
create trigger _120_immutable before update on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'id', 'entity_type', 'entity_id', 'external_system', 'external_entity_type', 'external_id', 'opened_at', 'created_at');
comment on trigger _120_immutable on bitrix_sync.entity_external_mapping is
  'A link never changes its user or Contact: a new mapping is opened instead (§4).';

drop trigger if exists _120_immutable on bitrix_sync.rebind_requests;
create trigger _120_immutable before update on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'id', 'user_id', 'previous_contact_id', 'target_contact_id', 'reason', 'operator_id', 'workflow_id', 'requested_at');
comment on trigger _120_immutable on bitrix_sync.rebind_requests is
  'The request, its reason and its operator are audit (§5.4): only its progress changes.';

drop trigger if exists _120_immutable on bitrix_sync.settings_versions;
create trigger _120_immutable before update on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg_settings_versions__freeze();
comment on trigger _120_immutable on bitrix_sync.settings_versions is
  'Values and audit are history once a version leaves draft (§12.3).';

drop trigger if exists _120_immutable on bitrix_sync.cutover;
create trigger _120_immutable before update on bitrix_sync.cutover
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'singleton', 'cutover_watermark', 'cancelled_count', 'performed_by', 'performed_at');
comment on trigger _120_immutable on bitrix_sync.cutover is
  'The cutover happens once (§17): moving the watermark would silently stop or replay App intake.';

drop trigger if exists _200_forbid_delete on bitrix_sync.cutover;
create trigger _200_forbid_delete before delete on bitrix_sync.cutover
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.cutover is 'The cutover record is kept: deleting it would close the processing gate.';
-- <<< sql/row_guards.sql
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
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change.'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),

  -- identity sequences: inserting into an identity column needs no right on its sequence
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),

  -- views
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.'),
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).'),
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.'),
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.'),
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
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),

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
  ('function', 'bitrix_sync.fail_rebind_request(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
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

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
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
