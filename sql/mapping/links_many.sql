-- User <-> Contact links (§6): the links a group of workflow steps opens, in one call (issue 36,
-- fourth round). open_mapping() inserts one link in a block with an exception handler (a
-- subtransaction per call) and reads the inbox for its Contact; the step lane sends a group's links
-- together (src/db/statement-batcher.ts, "set forms"), and this pays for the insert, its
-- subtransaction and the inbox read (_read_again_after_link, sql/workflows/read_again.sql) once per group.

create or replace function bitrix_sync.open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[])
returns table (ord integer, mapping bitrix_sync.entity_external_mapping)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer := coalesce(cardinality(p_user_ids), 0);
begin
  if coalesce(cardinality(p_contact_ids), 0) <> v_n or coalesce(cardinality(p_workflow_ids), 0) <> v_n then
    raise exception 'open_mappings needs one Contact and one workflow per user'
      using errcode = 'BS004', hint = 'Pass three arrays of the same length, in the same order.';
  end if;
  if v_n = 0 then
    return;
  end if;
  -- The links, in the caller's order. A second active link for a user or a Contact (in the table or
  -- within the group) refuses the whole call, as the same open_mapping() calls would refuse one.
  return query
  with ins as (
    insert into bitrix_sync.entity_external_mapping as m (entity_id, external_id, workflow_id)
    select i.user_id, i.contact_id, i.workflow_id
      from unnest(p_user_ids, p_contact_ids, p_workflow_ids) with ordinality as i(user_id, contact_id, workflow_id, n)
     order by i.n
    returning m.entity_id, m
  )
  select i.n::integer, ins.m
    from ins join unnest(p_user_ids) with ordinality as i(user_id, n) on i.user_id = ins.entity_id
   order by i.n;
  -- One more read of each Contact a robot's call about may have been missed, as open_mapping() queues it.
  perform bitrix_sync._read_again_after_link(p_contact_ids, p_workflow_ids);
exception
  when unique_violation then
    raise exception 'cannot link a user to a Contact: the user or the Contact already has an active link'
      using errcode = 'BS006',
            hint = 'Close the existing active mapping first (close_mapping), or use request_bitrix_contact_rebind().';
end $$;
comment on function bitrix_sync.open_mappings(uuid[], text[], uuid[]) is
  'open_mapping() for a group of links in one call: element k of each array is the k-th call''s argument. Creates each active link of a user to a Contact and returns (ord, mapping) in the caller''s order; queues one more read of each Contact whose robot call may have been missed, by open_mapping()''s rule (_read_again_after_link). All or nothing: a second active link for a user or a Contact, in the table or within the group, refuses the whole call (BS006). The step lane''s grouped link.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.open_mappings(uuid[],text[],uuid[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping (the step lane opens a group''s links with it).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
