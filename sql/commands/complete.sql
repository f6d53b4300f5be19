-- CRM commands (§7.2, §8): completed per sub-result, one or a batch at a time, under the command's
-- lease token (brought forward and released unsent: sql/commands/release.sql).

create or replace function bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null, updated_at = now()
   where id = p_id and status is not distinct from 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  -- A write that turned a Contact's registration flag on again: one more read of the Contact if a
  -- robot call about it was answered while the flag was off (sql/workflows/read_again.sql).
  if v_row.params ->> 'registered' = 'true' and v_row.params ->> 'contact_id' is not null then
    perform bitrix_sync._read_again_after_link(array[v_row.params ->> 'contact_id'], array[v_row.workflow_id]);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_command(bigint, uuid, jsonb) is
  'in_flight -> succeeded with a safe response projection, and wakes the workflow. A write that turned a Contact''s registration flag on queues one more read of it when a robot call was answered while the flag was off (_read_again_after_link). Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[])
returns setof bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_done bigint[];
  v_contacts text[];
  v_workflows uuid[];
begin
  if coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_lease_tokens), 0)
     or coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_responses), 0) then
    raise exception 'complete_commands needs one lease token and one response per command id'
      using errcode = 'BS004', hint = 'Pass three arrays of the same length, in the same order.';
  end if;
  -- One statement for the whole batch: the commands still held under their tokens succeed, and the
  -- workflows waiting for them wake (waiting_crm -> running, crm_replied) as complete_command does.
  with done as (
    update bitrix_sync.crm_commands c
       set status = 'succeeded', response = t.response, completed_at = now(), last_error_code = null,
           lease_token = null, locked_by = null, locked_until = null, updated_at = now()
      from unnest(p_ids, p_lease_tokens, p_responses) as t(id, token, response)
     where c.id = t.id and c.status is not distinct from 'in_flight' and c.lease_token = t.token
    returning c.id, c.workflow_id, c.params
  ), woken as (
    update bitrix_sync.workflow_instances w
       set state = 'running', next_attempt_at = now(), updated_at = now()
     where w.id in (select d.workflow_id from done d where d.workflow_id is not null)
       and w.state is not distinct from 'waiting_crm'
    returning w.id
  )
  select array_agg(d.id), array_agg(f.contact_id) filter (where f.contact_id is not null),
         array_agg(d.workflow_id) filter (where f.contact_id is not null)
    into v_done, v_contacts, v_workflows
    from done d
    -- The Contact of a write that turned its registration flag on; null for any other command.
    cross join lateral (select case when d.params ->> 'registered' = 'true' then d.params ->> 'contact_id' end
                          as contact_id) f;
  if v_done is null then
    return;
  end if;
  perform pg_notify('bitrix_sync_workflows', '');
  -- Writes that turned a Contact's registration flag on again: one more read of each Contact a robot
  -- call was answered about while the flag was off (sql/workflows/read_again.sql).
  if v_contacts is not null then
    perform bitrix_sync._read_again_after_link(v_contacts, v_workflows);
  end if;
  return query select unnest(v_done);
end $$;
comment on function bitrix_sync.complete_commands(bigint[], uuid[], jsonb[]) is
  'in_flight -> succeeded for many commands in one call, each with its safe response projection, waking their workflows (waiting_crm -> running). A write that turned a Contact''s registration flag on queues one more read of it when a robot call was answered while the flag was off (_read_again_after_link). Returns the ids completed; a command whose token is stale is left alone (its new holder settles it), where complete_command would refuse it with BS001.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.complete_commands(bigint[],uuid[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump settles a batch with it).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
