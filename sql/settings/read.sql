-- Hot settings (§12.3) as the service, the SQL rules and readiness read them: the active version
-- with the catalogue's defaults, one key, and the alert smart process's configuration.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
