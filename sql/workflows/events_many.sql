-- Workflows (§7.1): the transitions of a group of workflow steps in one call (issue 36, fourth
-- round). fire_workflow_event() reads, checks and moves one workflow, and its UPDATE pays
-- PostgreSQL's fixed cost (executor start-up, the table's trigger WHEN clauses read again) for one
-- row. The step lane sends a group's transitions together (src/db/statement-batcher.ts, "set
-- forms"), and this pays that cost once per group.

create or replace function bitrix_sync.fire_workflow_events(
  p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]
) returns table (ord integer, workflow bitrix_sync.workflow_instances)
-- enable_seqscan off: the rows are found by key (id = any) in every plan; a generic plan made while
-- the table's statistics were those of a few rows would keep a sequential scan as it grows
-- (sql/commands/issue_many.sql).
language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
declare
  v_n integer := coalesce(cardinality(p_ids), 0);
  v_to text[] := array[]::text[];
  v_bad text;
  v_notify boolean := false;
  r record;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_events), 0) <> v_n
     or coalesce(cardinality(p_changes), 0) <> v_n then
    raise exception 'fire_workflow_events needs one lease token, event and change set per workflow'
      using errcode = 'BS004', hint = 'Pass four arrays of the same length, in the same order.';
  end if;
  if v_n = 0 then
    return;
  end if;
  -- The rows are held from here to the caller's commit, taken in one order (by id).
  perform 1 from bitrix_sync.workflow_instances w where w.id = any (p_ids) order by w.id for update;
  -- Each element is checked as fire_workflow_event() checks its call, in the caller's order: the
  -- first refusal is the one the same calls made one after the other would raise.
  for r in
    select i.n, i.id, i.token, i.event, coalesce(i.changes, '{}'::jsonb) as changes, w.id is not null as found,
           w.state, w.lease_token, e.to_state,
           exists (select 1 from unnest(p_ids) with ordinality j(id, n) where j.id = i.id and j.n < i.n) as repeated
      from unnest(p_ids, p_lease_tokens, p_events, p_changes) with ordinality as i(id, token, event, changes, n)
      left join bitrix_sync.workflow_instances w on w.id = i.id and w.id = any (p_ids)
      left join bitrix_sync.state_edges e
        on e.machine = 'workflow' and e.from_state = w.state and e.event = i.event
     order by i.n
  loop
    if not r.found then
      raise exception 'workflow % does not exist', r.id
        using errcode = 'BS005', hint = 'Check the workflow id.';
    end if;
    if r.repeated then
      raise exception 'workflow % is named twice in one call', r.id
        using errcode = 'BS004', hint = 'Pass each workflow once: its second event would start from the state its first one left.';
    end if;
    if r.lease_token is distinct from r.token then
      perform bitrix_sync._refuse_stale('workflow', r.id::text);
    end if;
    if r.to_state is null then
      raise exception 'workflow event % is not allowed in state %', r.event, r.state
        using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
    end if;
    select string_agg(k, ', ') into v_bad from jsonb_object_keys(r.changes) k
     where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                     'processed_revision');
    if v_bad is not null then
      raise exception 'workflow event cannot change %', v_bad
        using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
    end if;
    if r.changes ->> 'last_error_code' is not null then
      perform bitrix_sync._check_code(r.changes ->> 'last_error_code');
    end if;
    if r.changes ->> 'outcome' is not null then
      perform bitrix_sync._check_code(r.changes ->> 'outcome');
    end if;
    v_to := v_to || r.to_state;
    v_notify := v_notify or r.to_state in ('waiting_retry', 'running');
  end loop;

  -- One UPDATE for the group, each row with its own event's changes, as fire_workflow_event()
  -- writes them (element k's values are found by the row's place in the arrays).
  return query
  with moved as (
    update bitrix_sync.workflow_instances w
       set state = v_to[array_position(p_ids, w.id)],
           current_step = coalesce(p_changes[array_position(p_ids, w.id)] ->> 'current_step', w.current_step),
           step_data = case when p_changes[array_position(p_ids, w.id)] ? 'step_data'
                            then p_changes[array_position(p_ids, w.id)] -> 'step_data' else w.step_data end,
           contact_id = case when p_changes[array_position(p_ids, w.id)] ? 'contact_id'
                             then p_changes[array_position(p_ids, w.id)] ->> 'contact_id' else w.contact_id end,
           outcome = case when p_changes[array_position(p_ids, w.id)] ? 'outcome'
                          then p_changes[array_position(p_ids, w.id)] ->> 'outcome' else w.outcome end,
           last_error_code = case when p_changes[array_position(p_ids, w.id)] ? 'last_error_code'
                                  then p_changes[array_position(p_ids, w.id)] ->> 'last_error_code'
                                  else w.last_error_code end,
           next_attempt_at = coalesce((p_changes[array_position(p_ids, w.id)] ->> 'next_attempt_at')::timestamptz,
                                      case when v_to[array_position(p_ids, w.id)] = 'running' then w.next_attempt_at
                                           else now() end),
           processed_revision = coalesce((p_changes[array_position(p_ids, w.id)] ->> 'processed_revision')::integer,
                                         w.processed_revision),
           -- The lease belongs to a worker stepping a running workflow; any other state releases it.
           lease_token = case when v_to[array_position(p_ids, w.id)] = 'running' then w.lease_token end,
           locked_by = case when v_to[array_position(p_ids, w.id)] = 'running' then w.locked_by end,
           locked_until = case when v_to[array_position(p_ids, w.id)] = 'running' then w.locked_until end,
           finished_at = case when v_to[array_position(p_ids, w.id)] in ('succeeded', 'failed', 'cancelled')
                              then now() end,
           updated_at = now()
     where w.id = any (p_ids)
    returning w
  )
  select i.n::integer, m.w
    from moved m join unnest(p_ids) with ordinality as i(id, n) on i.id = (m.w).id
   order by i.n;
  if v_notify then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync.fire_workflow_events(uuid[], uuid[], text[], jsonb[]) is
  'fire_workflow_event() for a group of workflows in one call: element k of each array is the k-th call''s argument (null changes: none). Each workflow moves along the edge its event names, under its lease token, with the allowed changes; returns (ord, workflow) in the caller''s order. All or nothing, with the refusal the same calls made one after the other would raise first: BS005 unknown workflow, BS001 stale lease, BS002 illegal event, BS004 a change not allowed or a workflow named twice. The step lane''s grouped transition.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.fire_workflow_events(uuid[],uuid[],text[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (the step lane moves a group''s workflows with it).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
