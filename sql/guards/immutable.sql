-- Row guards (§6.3, §5.4, §12.3, §17; issue 10): the columns that identify a row or record who did
-- what never change, and a settings version is frozen once proposed. Triggers, so they hold for
-- every writer, the schema owner included.
-- TG_ARGV: the columns that never change.

create or replace function bitrix_sync.tg__refuse_immutable_change() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.tg_settings_versions__freeze() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_allowed text[];
  v_changed text;
begin
  -- What each step of the settings machine may write; everything else is history once written.
  v_allowed := case
    when old.status = 'draft' and new.status = 'draft' then array['settings_values', 'note']
    when old.status = 'draft' then array['status', 'settings_values', 'validation_errors', 'validated_at',
                                         'validated_db_user']
    when old.status = 'validated' and new.status = 'active' then array['status', 'activated_by', 'activated_at',
                                                                       'activated_db_user']
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
  'BEFORE UPDATE guard on settings_versions: values and note change only while a version is a draft; validation, activation and supersession each write only their own audit columns (the declared actor and the login); created_by, created_db_user, based_on, rollback_of never change. SQLSTATE BS031.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_settings_versions__freeze()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
    'id', 'user_id', 'previous_contact_id', 'target_contact_id', 'reason', 'operator_id', 'workflow_id', 'requested_at',
    'requested_db_user');
comment on trigger _120_immutable on bitrix_sync.rebind_requests is
  'The request, its reason, its operator and the login that asked are audit (§5.4): only its progress changes.';

drop trigger if exists _120_immutable on bitrix_sync.settings_versions;
create trigger _120_immutable before update on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg_settings_versions__freeze();
comment on trigger _120_immutable on bitrix_sync.settings_versions is
  'Values and audit are history once a version leaves draft (§12.3).';

drop trigger if exists _120_immutable on bitrix_sync.cutover;
create trigger _120_immutable before update on bitrix_sync.cutover
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'singleton', 'cutover_watermark', 'cancelled_count', 'performed_by', 'performed_at', 'performed_db_user');
comment on trigger _120_immutable on bitrix_sync.cutover is
  'The cutover happens once (§17): moving the watermark would silently stop or replay App intake.';
