-- Links made by phone alone (§5.1 B1.1, B2.1; docs/workflows.md "Links made by phone alone"): such
-- a link rests on the App's phone number only. If the App does not verify phone numbers, whoever
-- signs up with someone else's number is linked to that person's Contact, and the final read copies
-- the Contact's name, e-mail and citizenship into their profile. With the hot setting
-- mapping.hold_after_phone_link on, the link is made (the Contact gets the user id, the mapping is
-- active) but the CRM-master fields are held back from the App until
--   * a robot webhook for the Contact reads CRM-master values (name, e-mail, citizenship) that
--     differ from those the first read after the link saw. bitrix-sync never writes these fields
--     into a Contact it did not create (it writes the user id, the registration flag and the
--     phone), so only a change made in the CRM moves them: the robot calls the service's own
--     writes cause (the user id, and any later phone change of the App user, which an impostor
--     controls) release nothing, however new their updatedTime. The values are compared as one
--     keyed hash (src/hash.ts heldValuesHash), never stored in the clear; or
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
  p_mapping_id uuid, p_crm_updated_at timestamptz, p_robot_webhook boolean, p_values_hash text
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
  if p_values_hash is null or p_values_hash !~ '^[A-Za-z0-9_-]{8}:v3:[A-Za-z0-9_-]{43}$' then
    raise exception 'a held link''s read needs the keyed hash of the Contact''s CRM-master values'
      using errcode = 'BS004', hint = 'Pass src/hash.ts heldValuesHash(): the hash key''s id, a colon and the v3 hash.';
  end if;
  if v_row.held_crm_updated_at is null or v_row.held_values_hash is null
     or split_part(v_row.held_values_hash, ':', 1) <> split_part(p_values_hash, ':', 1) then
    -- The first read after the link (or the first since the values were recorded, or since the hash
    -- key changed, when two hashes say nothing about each other): what a change is measured against.
    update bitrix_sync.entity_external_mapping m
       set held_crm_updated_at = coalesce(m.held_crm_updated_at, p_crm_updated_at, now()),
           held_values_hash = p_values_hash
     where m.id = p_mapping_id;
    return 'held';
  end if;
  if p_robot_webhook and p_crm_updated_at > v_row.held_crm_updated_at
     and p_values_hash <> v_row.held_values_hash then
    update bitrix_sync.entity_external_mapping m
       set hold_released_at = now(), hold_released_by = 'robot_webhook'
     where m.id = p_mapping_id;
    return 'released';
  end if;
  return 'held';
end $$;
comment on function bitrix_sync.held_link_read(uuid, timestamptz, boolean, text) is
  'A read of a linked Contact meets its mapping''s hold: not_held (apply as usual); held (apply nothing; the first read after the link records the Contact''s updatedTime and the keyed hash of its CRM-master values, p_values_hash); released (p_robot_webhook, a newer updatedTime and CRM-master values that differ from the recorded ones: a change made in the CRM, since the service never writes those fields into a Contact it linked; the hold ends, apply now). A hash under another key replaces the recorded one and releases nothing. BS004 for a hash of the wrong form.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.held_link_read(uuid,timestamp with time zone,boolean,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a read of a held link''s Contact (final read, webhook, reconciliation) records, keeps or releases the hold.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- The form the previous release calls (without the values): it records the first read and releases
-- nothing, since a newer updatedTime alone cannot tell a person's change from the service's own.
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
    update bitrix_sync.entity_external_mapping m
       set held_crm_updated_at = coalesce(p_crm_updated_at, now())
     where m.id = p_mapping_id;
  end if;
  return 'held';
end $$;
comment on function bitrix_sync.held_link_read(uuid, timestamptz, boolean) is
  'The previous release''s form of held_link_read, kept for it: not_held, or held (the first read after the link records the Contact''s updatedTime). It never releases a hold: only the form with the values'' hash can tell a change made in the CRM from the service''s own write; an admin still confirms (confirm_phone_link).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.held_link_read(uuid,timestamp with time zone,boolean)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: the previous release''s read of a held link; keeps the hold, releases nothing.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
