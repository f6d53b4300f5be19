-- Hot settings (§12.3): versions with validation status and audit, activation of validated
-- versions only, rollback, and a NOTIFY so workers reload. The admin's functions.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.propose_settings(jsonb,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.activate_settings_version(integer,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
