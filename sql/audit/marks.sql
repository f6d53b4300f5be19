-- The convergence audit's marks: one per active link, kept by a trigger on entity_external_mapping.

-- Every active link has an audit mark from the moment it is opened (audited_at = opened_at until
-- a run compares it), and loses it when it closes: the audit then finds the links it should
-- compare next, and those overdue, from the oldest mark on (audit_marks_due_idx) instead of
-- reading every link each run (docs/performance.md, "Scale").
create or replace function bitrix_sync.tg_entity_external_mapping__audit_mark() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  if tg_op = 'INSERT' then
    if new.status = 'active' then
      insert into bitrix_sync.audit_marks (mapping_id, user_id, audited_at)
      values (new.id, new.entity_id, new.opened_at)
      on conflict (mapping_id) do nothing;
    end if;
  elsif new.status is distinct from 'active' then
    delete from bitrix_sync.audit_marks k where k.mapping_id = new.id;
  end if;
  return null;
end $$;
comment on function bitrix_sync.tg_entity_external_mapping__audit_mark() is
  'Trigger (after insert, after update of status on entity_external_mapping): a link opened active gets its audit mark (audited_at = opened_at: never compared); a link that is no longer active loses it. Security definer: nobody else writes audit_marks.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_entity_external_mapping__audit_mark()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): one audit mark per active link, whoever opens or closes it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _950_audit_mark on bitrix_sync.entity_external_mapping;
create trigger _950_audit_mark after insert or update of status on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg_entity_external_mapping__audit_mark();
comment on trigger _950_audit_mark on bitrix_sync.entity_external_mapping is
  'Keeps one audit mark per active link (bitrix_sync.audit_marks).';
