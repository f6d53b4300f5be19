-- Workflows (§7.1): one active workflow per user. An intent starts one or joins the one running; an
-- intent that arrives during a rebind is held on the rebind's row and started when it finishes.

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text,
  p_trace_context text default null
) returns table (workflow_id uuid, action text, previous_trace_context text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_trace text := bitrix_sync._trace_context(p_trace_context);
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
      -- A rebind is never joined: converging to the App's intent would drop it (issue 11). The
      -- intent is held on its row, the newest one winning as in a join, and starts as the next
      -- workflow when the rebind ends (tg_workflow_instances__start_held_intent), so the App change
      -- is carried out against the mapping the rebind left.
      if v_row.workflow_type = 'contact.rebind' then
        if v_row.held_intent_type is not distinct from p_intent_type
           and v_row.held_content_hash is not distinct from p_content_hash then
          return query select v_row.id, 'unchanged'::text, v_row.trace_context;
          return;
        end if;
        update bitrix_sync.workflow_instances w
           set held_intent_type = p_intent_type, held_source_task_id = p_source_task_id,
               held_content_hash = p_content_hash, held_at = now()
         where w.id = v_row.id;
        return query select v_row.id, 'held'::text, v_row.trace_context;
        return;
      end if;
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text, v_row.trace_context;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- The workflow now converges to this intent: its remaining steps belong to its trace.
             trace_context = coalesce(v_trace, w.trace_context),
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text, v_row.trace_context;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text, null::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash,
                                                  trace_context)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash, v_trace)
      returning * into v_row;
    exception when unique_violation then
      -- Two intents of one user claimed at once: the other call started the workflow first and has
      -- committed by now (the index waited for it), so look again and join it.
      if v_try = 3 then
        raise;
      end if;
      continue;
    end;
    perform pg_notify('bitrix_sync_workflows', '');
    return query select v_row.id, 'started'::text, null::text;
    return;
  end loop;
end $$;
comment on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text, text) is
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step) and the workflow takes the intent''s trace context (W3C traceparent; malformed ones are ignored). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged). An active contact.rebind is not joined: the intent is held on it (action held) and starts when the rebind ends. previous_trace_context is the joined, held or unchanged workflow''s context before the call, for a span link.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.tg_workflow_instances__start_held_intent() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  -- The rebind's row has just left the active states, so the one-active-per-user index admits the
  -- next workflow. A concurrent intake waiting on the row lock finds this one and joins it.
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
  values (new.held_intent_type, new.held_intent_type, new.user_id, new.held_source_task_id, new.held_content_hash);
  perform pg_notify('bitrix_sync_workflows', '');
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__start_held_intent() is
  'AFTER UPDATE OF state trigger: when a workflow holding an App intent (a contact.rebind) finishes, however it finishes, the held intent starts as the user''s next workflow.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_workflow_instances__start_held_intent()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _400_start_held_intent on bitrix_sync.workflow_instances;
create trigger _400_start_held_intent after update of state on bitrix_sync.workflow_instances
  for each row
  -- Written compactly, as _300_close_rebind_request's (sql/rebind/close.sql).
  when (new.held_intent_type is not null and new.state::text = any ('{succeeded,failed,cancelled}'::text[])
        and old.state::text <> all ('{succeeded,failed,cancelled}'::text[]))
  execute function bitrix_sync.tg_workflow_instances__start_held_intent();
comment on trigger _400_start_held_intent on bitrix_sync.workflow_instances is
  'Starts the App intent held during a rebind once the rebind has finished (after _300_close_rebind_request).';
