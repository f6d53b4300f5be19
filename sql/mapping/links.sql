-- The canonical user <-> Contact mapping (§4, §6.3): closing a link and reading the active ones. Only
-- these functions and open_mapping() (sql/mapping/open.sql) write it; history rows are never deleted
-- (trigger) and closed/broken rows are final (guard trigger).

create or replace function bitrix_sync.close_mapping(
  p_mapping_id uuid, p_reason text, p_workflow_id uuid, p_broken boolean default false
) returns bitrix_sync.entity_external_mapping
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  perform bitrix_sync._check_code(p_reason);
  update bitrix_sync.entity_external_mapping
     set status = case when p_broken then 'broken' else 'closed' end,
         closed_at = now(), close_reason = p_reason, workflow_id = coalesce(p_workflow_id, workflow_id)
   where id = p_mapping_id and status = 'active'
  returning * into v_row;
  if not found then
    raise exception 'mapping % is not active', p_mapping_id
      using errcode = 'BS002', hint = 'closed and broken mappings are final; look up the current active row.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.close_mapping(uuid, text, uuid, boolean) is
  'active -> closed (or broken with p_broken) with a reason code and the workflow as correlation. The row stays as history.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.active_mapping_for_user(p_user_id uuid)
returns bitrix_sync.entity_external_mapping
language sql stable set search_path = pg_catalog, pg_temp as $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and entity_type = 'user' and entity_id = p_user_id and status = 'active'
$$;
comment on function bitrix_sync.active_mapping_for_user(uuid) is 'The user''s active Contact link, or null.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.active_mapping_for_contact(p_contact_id text)
returns bitrix_sync.entity_external_mapping
language sql stable set search_path = pg_catalog, pg_temp as $$
  select * from bitrix_sync.entity_external_mapping
   where external_system = 'bitrix24' and external_entity_type = 'contact' and external_id = p_contact_id
     and status = 'active'
$$;
comment on function bitrix_sync.active_mapping_for_contact(text) is 'The Contact''s active user link, or null.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
