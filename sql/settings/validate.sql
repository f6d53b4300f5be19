-- Hot settings (§12.3): a version is checked against the catalogue before it can be activated.
-- Every key has bounds (the table's CHECK settings_bounded): integers and numbers a range (integers
-- within int4, so every consumer reads them as int4), text a maximum length, enums their values, the
-- json object its allowed entries and the maximum length of each value.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._normalise_settings(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
