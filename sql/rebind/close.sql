-- A rebind request is closed when its workflow finishes (§5.4), by a trigger, with what the CRM
-- already holds recorded in its outcome.

create or replace function bitrix_sync._rebind_crm_outcome(p_workflow_id uuid) returns text
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- The rebind's writes: the target write sets this user (set_user self), the clear of the previous
  -- Contact removes it (set_user clear). Only writes that were sent count.
  with w as (
    select coalesce(bool_or(x.set_user = 'self'), false) as target_sent,
           coalesce(bool_or(x.set_user = 'self' and x.ok), false) as target_done,
           coalesce(bool_or(x.set_user = 'clear'), false) as clear_sent,
           coalesce(bool_or(x.set_user = 'clear' and x.ok), false) as clear_done
      from (select c.params ->> 'set_user' as set_user, c.status = 'succeeded' as ok
              from bitrix_sync.crm_commands c
             where c.workflow_id = p_workflow_id and c.alert_id is null
               and c.command_type = 'contact.update' and c.first_sent_at is not null) x
  )
  select case
           when not target_sent then 'crm_unchanged'
           when not target_done then 'target_write_unconfirmed'
           when not clear_sent then 'target_written'
           when not clear_done then 'target_written_clear_unconfirmed'
           else 'target_written_previous_cleared'
         end
    from w
$$;
comment on function bitrix_sync._rebind_crm_outcome(uuid) is
  'Internal: what a contact.rebind workflow that did not complete left in the CRM, from its commands: crm_unchanged (no write sent), target_write_unconfirmed (sent, never confirmed), target_written (the target carries the user, the previous Contact was not cleared), target_written_clear_unconfirmed, target_written_previous_cleared (both written, the link did not move).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._rebind_crm_outcome(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of _close_rebind_request and cancel_rebind_request.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- Closing a request is the trigger's job, from the row the UPDATE left: the function takes the
-- workflow's id, never a row (a caller could build one claiming any state and code), reads the
-- workflow itself under its lock and refuses one that has not finished. Nobody is granted it: the
-- trigger function, security definer, runs it as the owner.
create or replace function bitrix_sync._close_rebind_request(p_workflow_id uuid)
returns bitrix_sync.rebind_requests
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = p_workflow_id for update;
  if not found or v_wf.workflow_type <> 'contact.rebind' then
    raise exception 'workflow % is not a contact.rebind workflow', p_workflow_id
      using errcode = 'BS005', hint = 'Only a rebind''s workflow has a request to close.';
  end if;
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    raise exception 'workflow % is %, not finished: its rebind request stays open', p_workflow_id, v_wf.state
      using errcode = 'BS002', hint = 'A request closes when its workflow reaches succeeded, failed or cancelled.';
  end if;
  -- A cancelled workflow cancels its request; any other end without complete_rebind fails it with
  -- the workflow's code (a refusal, a CRM error, the retry horizon of a command or of a step).
  update bitrix_sync.rebind_requests r
     set status = case when v_wf.state = 'cancelled' then 'cancelled' else 'failed' end,
         failure_code = case v_wf.state when 'cancelled' then null
                                        when 'failed' then coalesce(v_wf.last_error_code, 'rebind_not_completed')
                                        else 'rebind_not_completed' end,
         outcome = bitrix_sync._rebind_crm_outcome(v_wf.id),
         completed_at = now()
   where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync._close_rebind_request(uuid) is
  'Internal (the trigger _300_close_rebind_request): the still open request of a finished contact.rebind workflow, read by id under the row''s lock, becomes failed (failure_code = the workflow''s last_error_code) or cancelled, with the outcome it left in the CRM. BS005 for another kind of workflow, BS002 for one not finished. Returns null when the request was already finished. Granted to nobody.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._close_rebind_request(uuid)', array[]::text[], array[]::text[], array[]::text[],
   'Internal helper of the trigger that closes the request of a finished contact.rebind workflow (the trigger function is security definer); takes the workflow id, never a row.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.tg_workflow_instances__close_rebind_request() returns trigger
-- Security definer: the runtime role's transitions fire it, and that role neither writes rebind
-- requests nor executes _close_rebind_request (docs/security.md).
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform bitrix_sync._close_rebind_request(new.id);
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__close_rebind_request() is
  'AFTER UPDATE OF state trigger (security definer): a contact.rebind workflow that reaches a final state closes its open request, so no failing path can leave it in_progress (which would refuse every later rebind of the user).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_workflow_instances__close_rebind_request()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): closes the request of a finished contact.rebind workflow, whoever moves it.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _300_close_rebind_request on bitrix_sync.workflow_instances;
create trigger _300_close_rebind_request after update of state on bitrix_sync.workflow_instances
  for each row
  -- Written compactly (text arrays, not IN lists over varchar): PostgreSQL reads a trigger's WHEN
  -- from its stored form for every UPDATE statement on the table (docs/performance.md).
  when (new.workflow_type::text = 'contact.rebind' and new.state::text = any ('{succeeded,failed,cancelled}'::text[])
        and old.state::text <> all ('{succeeded,failed,cancelled}'::text[]))
  execute function bitrix_sync.tg_workflow_instances__close_rebind_request();
comment on trigger _300_close_rebind_request on bitrix_sync.workflow_instances is
  'Closes the rebind request of a contact.rebind workflow that finished without complete_rebind (§5.4, issue 11).';
