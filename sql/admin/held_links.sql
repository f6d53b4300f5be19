-- Links made by phone alone (§5.1 B1.1, B2.1; docs/admin.md) as an admin confirms them: the held
-- links without user or Contact IDs, and the audited confirmation that releases a hold and queues
-- the read that applies the fields (the hold itself: sql/mapping/held.sql).

create or replace view bitrix_sync.held_phone_links as
select m.id as mapping_id, m.workflow_id, m.held_at,
       extract(epoch from now() - m.held_at)::bigint as age_sec,
       m.held_crm_updated_at is not null as read_seen
  from bitrix_sync.entity_external_mapping m
 where m.status = 'active' and m.held_at is not null and m.hold_released_at is null;
comment on view bitrix_sync.held_phone_links is
  'Held links as an admin looks at them (docs/admin.md): the mapping and the workflow that made it, since when, and whether the Contact has been read since the link (read_seen). No user or Contact IDs; confirm_phone_link takes the user id.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.held_phone_links', array[]::text[], array['SELECT'], array[]::text[],
   'Held links made by phone alone, as an admin confirms them (docs/admin.md); no user or Contact IDs.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text)
returns table (mapping_id uuid, inbox_id bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
  v_inbox bigint;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_row from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = p_user_id and m.status = 'active'
   for update;
  if not found then
    raise exception 'this user has no active link to a Contact'
      using errcode = 'BS005',
            hint = 'Check the user id; only an active link can be held. Held links: select * from bitrix_sync.held_phone_links;';
  end if;
  if v_row.held_at is null or v_row.hold_released_at is not null then
    raise exception 'this user''s link is not held: its CRM-master fields are applied already'
      using errcode = 'BS002',
            hint = 'Nothing to confirm. Held links: select * from bitrix_sync.held_phone_links;';
  end if;
  update bitrix_sync.entity_external_mapping m
     set hold_released_at = now(), hold_released_by = 'admin'
   where m.id = v_row.id;
  perform bitrix_sync._record_admin_action('confirm_phone_link', v_row.workflow_id, null, null, v_row.external_id,
                                           p_reason, p_operator_id);
  -- The fields follow through the webhooks lane: a read of the Contact, applied as a robot call's.
  select a.inbox_id into v_inbox
    from bitrix_sync.accept_webhooks(array['contact'], array[3], array[v_row.external_id::text], array[null::inet]) a;
  return query select v_row.id, v_inbox;
end $$;
comment on function bitrix_sync.confirm_phone_link(uuid, text, text) is
  'Admin (docs/admin.md "Held phone links"): releases the hold of a user''s link made by phone alone (hold_released_by admin), audited in admin_actions with the operator''s reason and the login, and queues a read of the Contact (an inbox row) that applies its CRM-master fields to the App. BS004 missing reason or operator, BS005 no active link, BS002 the link is not held.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.confirm_phone_link(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Held phone links: release a hold and queue the read that applies the fields, audited (docs/admin.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
