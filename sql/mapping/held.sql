-- Links made by phone alone (§5.1 B1.1, B2.1; docs/workflows.md "Links made by phone alone"): such
-- a link rests on the App's phone number only. If the App does not verify phone numbers, whoever
-- signs up with someone else's number is linked to that person's Contact, and the final read copies
-- the Contact's name, e-mail and citizenship into their profile. With the hot setting
-- mapping.hold_after_phone_link on, the link is made (the Contact gets the user id, the mapping is
-- active) but the CRM-master fields are held back from the App until
--   * a robot webhook for the Contact reports a change made in the CRM after the link (its read
--     shows a newer updatedTime than the first read after the link, which already includes the
--     service's own write of the user id: the robot call that write causes releases nothing), or
--   * an admin confirms (confirm_phone_link), which also queues a read of the Contact.
-- Then the fields are applied as for any link, so nothing is lost. Reconciliation and the workflows'
-- reads apply nothing while a link is held. A link found through the user id the Contact carries
-- (§4), one to a Contact bitrix-sync created, one a person chose (a parked workflow's link_contact, a
-- rebind) is not made by phone alone and is not held; except that a link found through a user id
-- that an earlier, still held link of the same user and Contact wrote keeps that hold
-- (keep_phone_link_hold): a deactivation and a return must not turn a phone into proof. The hold is
-- the link's: a link closed (deactivation, rebind, a missing Contact) ends it, and a new link by
-- phone is held anew. Turning the setting off holds no new link and keeps the holds already recorded
-- until they are released.
-- The admin's side (confirm_phone_link, held_phone_links): sql/admin/held_links.sql.

create or replace function bitrix_sync.hold_phone_link(p_user_id uuid, p_contact_id text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_held boolean;
begin
  if not coalesce((bitrix_sync._active_setting('mapping.hold_after_phone_link') #>> '{}')::boolean, false) then
    return false;
  end if;
  update bitrix_sync.entity_external_mapping m
     set held_at = now()
   where m.entity_id = p_user_id and m.external_id = p_contact_id and m.status = 'active' and m.held_at is null
  returning true into v_held;
  return coalesce(v_held, false);
end $$;
comment on function bitrix_sync.hold_phone_link(uuid, text) is
  'Called right after a link made by phone alone (B1.1, B2.1) is opened: records the hold (held_at) on the user''s active mapping of that Contact when mapping.hold_after_phone_link is on. Returns whether the link is held now.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.hold_phone_link(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: the hold of a link made by phone alone (mapping.hold_after_phone_link).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.keep_phone_link_hold(p_user_id uuid, p_contact_id text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_held boolean;
begin
  -- The Contact carries this user's id only because an earlier link of the same pair, made by phone
  -- alone, wrote it; that link closed (a deactivation, say) while still held. The user id is no more
  -- proof than the phone was: the new link keeps the hold, whatever the setting says now.
  if not exists (
       select 1 from bitrix_sync.entity_external_mapping p
        where p.id = (select l.id from bitrix_sync.entity_external_mapping l
                       where l.entity_id = p_user_id and l.external_id = p_contact_id and l.status <> 'active'
                       order by l.opened_at desc limit 1)
          and p.held_at is not null and p.hold_released_at is null) then
    return false;
  end if;
  update bitrix_sync.entity_external_mapping m
     set held_at = now()
   where m.entity_id = p_user_id and m.external_id = p_contact_id and m.status = 'active' and m.held_at is null
  returning true into v_held;
  return coalesce(v_held, false);
end $$;
comment on function bitrix_sync.keep_phone_link_hold(uuid, text) is
  'Called right after a link found through the user id the Contact carries (§4 restore, the previous link''s Contact): when the latest earlier link of the same user and Contact was held and never released, the new link is held too (the user id was written on the strength of the phone alone). Returns whether the link is held now.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.keep_phone_link_hold(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a link found through the user id an earlier, still held link of the pair wrote keeps the hold.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.held_link_read(
  p_mapping_id uuid, p_crm_updated_at timestamptz, p_robot_webhook boolean
) returns text
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  select * into v_row from bitrix_sync.entity_external_mapping m where m.id = p_mapping_id for update;
  if not found or v_row.status <> 'active' or v_row.held_at is null or v_row.hold_released_at is not null then
    return 'not_held';
  end if;
  if v_row.held_crm_updated_at is null then
    -- The first read after the link: what a later robot webhook has to be newer than.
    update bitrix_sync.entity_external_mapping m
       set held_crm_updated_at = coalesce(p_crm_updated_at, now())
     where m.id = p_mapping_id;
    return 'held';
  end if;
  if p_robot_webhook and p_crm_updated_at > v_row.held_crm_updated_at then
    update bitrix_sync.entity_external_mapping m
       set hold_released_at = now(), hold_released_by = 'robot_webhook'
     where m.id = p_mapping_id;
    return 'released';
  end if;
  return 'held';
end $$;
comment on function bitrix_sync.held_link_read(uuid, timestamptz, boolean) is
  'A read of a linked Contact meets its mapping''s hold: not_held (apply as usual); held (apply nothing; the first read after the link records the Contact''s updatedTime); released (p_robot_webhook and the Contact changed after that first read: the hold ends, apply now).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.held_link_read(uuid,timestamp with time zone,boolean)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a read of a held link''s Contact (final read, webhook, reconciliation) records, keeps or releases the hold.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
