-- Hot settings (§12.3): the alert smart process's rules across keys (§11), part of every
-- validation of a settings version (_settings_errors, sql/settings/validate.sql).

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._alert_settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
