-- A new user <-> Contact link (§4, §6.3), one at a time (a group's: sql/mapping/links_many.sql),
-- with one more read of the Contact by the rule of sql/workflows/read_again.sql.

create or replace function bitrix_sync.open_mapping(p_user_id uuid, p_contact_id text, p_workflow_id uuid)
returns bitrix_sync.entity_external_mapping
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  insert into bitrix_sync.entity_external_mapping (entity_id, external_id, workflow_id)
  values (p_user_id, p_contact_id, p_workflow_id)
  returning * into v_row;
  -- One more read of the Contact if a robot's call about it may have been missed (the rule is there).
  perform bitrix_sync._read_again_after_link(array[p_contact_id], array[p_workflow_id]);
  return v_row;
exception
  when unique_violation then
    raise exception 'cannot link user to Contact %: the user or the Contact already has an active link', p_contact_id
      using errcode = 'BS006',
            hint = 'Close the existing active mapping first (close_mapping), or use request_bitrix_contact_rebind().';
end $$;
comment on function bitrix_sync.open_mapping(uuid, text, uuid) is
  'Creates the active link of a user to a Contact. Refuses a second active link for either side (BS006). Queues one more read of the Contact (webhook event linked) when a robot call about it is unprocessed or was answered unknown_mapping or registration_inactive since the workflow began or since the Contact''s last link closed, so an edit made while the link was being made, or while the Contact had none, is not lost.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
