-- CRM commands (§7.2): the issue of a group of workflow steps in two statements, whatever the
-- group's size (issue 36, fourth round). issue_command() moves one workflow and inserts one command,
-- and each of its two statements pays PostgreSQL's fixed cost (executor start-up, the table's trigger
-- WHEN clauses and CHECKs read again, its indexes opened) for one row. The step lane sends a group's
-- issues together (src/db/statement-batcher.ts, "set forms"), and this pays that cost once per group.

create or replace function bitrix_sync.issue_commands(
  p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[],
  p_trace_contexts text[], p_step_data jsonb[]
) returns table (ord integer, command bitrix_sync.crm_commands)
-- enable_seqscan off: the UPDATE below finds its rows by key (id = any) in every plan. A generic plan
-- made while the table's statistics were those of a few rows took a sequential scan and kept it as
-- the table grew (bench:engine: 10-15 ms a call where the keys take well under one).
language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
declare
  v_n integer := coalesce(cardinality(p_workflow_ids), 0);
  v_moved uuid[];
  v_revisions integer[];
  v_correlations uuid[];
  v_stale uuid;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_command_types), 0) <> v_n
     or coalesce(cardinality(p_params), 0) <> v_n or coalesce(cardinality(p_steps), 0) <> v_n
     or coalesce(cardinality(p_trace_contexts), 0) <> v_n or coalesce(cardinality(p_step_data), 0) <> v_n then
    raise exception 'issue_commands needs one value of each argument per workflow'
      using errcode = 'BS004', hint = 'Pass seven arrays of the same length, in the same order (null where issue_command() takes its default).';
  end if;
  if v_n = 0 then
    return;
  end if;
  if exists (select 1 from unnest(p_step_data) d where d is not null and jsonb_typeof(d) <> 'object') then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  -- running -> waiting_crm (await_crm; the guard trigger checks each edge) under each caller's lease,
  -- with the step and its state in the same row version, as issue_command() writes it. The rows are
  -- found by their keys alone (id = any), each caller's values by the workflow's place in the arrays
  -- (a join with unnest() was planned as a scan of the table once per element).
  with moved as (
    update bitrix_sync.workflow_instances w
       set state = 'waiting_crm',
           current_step = coalesce(p_steps[array_position(p_workflow_ids, w.id)], w.current_step),
           step_data = coalesce(p_step_data[array_position(p_workflow_ids, w.id)], w.step_data),
           next_attempt_at = now(), lease_token = null, locked_by = null, locked_until = null,
           updated_at = now()
     where w.id = any (p_workflow_ids) and w.state is not distinct from 'running'
       and w.lease_token = p_lease_tokens[array_position(p_workflow_ids, w.id)]
    returning w.id, w.revision, w.correlation_id
  )
  select array_agg(m.id), array_agg(m.revision), array_agg(m.correlation_id)
    into v_moved, v_revisions, v_correlations
    from moved m;
  if coalesce(cardinality(v_moved), 0) < v_n then
    -- The first workflow (in the caller's order) not held under its token, not running, or named a
    -- second time (its second issue finds it waiting_crm, as a second issue_command() would): nothing
    -- of the group is kept (the refusal rolls the statement back), as for issue_command().
    select i.id into v_stale
      from unnest(p_workflow_ids) with ordinality i(id, n)
     where i.id is null or not (i.id = any (coalesce(v_moved, '{}'::uuid[])))
        or exists (select 1 from unnest(p_workflow_ids) with ordinality j(id, n) where j.id = i.id and j.n < i.n)
     order by i.n limit 1;
    perform bitrix_sync._refuse_stale('workflow', coalesce(v_stale::text, 'null'));
  end if;
  -- The commands, in the caller's order (their ids rise with it).
  return query
  with ins as (
    insert into bitrix_sync.crm_commands as c
      (workflow_id, command_type, params, revision, correlation_id, trace_context)
    select i.id, i.command_type, coalesce(i.params, '{}'::jsonb), m.revision, m.correlation_id,
           bitrix_sync._trace_context(i.trace_context)
      from unnest(p_workflow_ids, p_command_types, p_params, p_trace_contexts) with ordinality
             as i(id, command_type, params, trace_context, n)
      join unnest(v_moved, v_revisions, v_correlations) as m(id, revision, correlation_id) on m.id = i.id
     order by i.n
    returning c.workflow_id, c
  )
  select i.n::integer, ins.c
    from ins join unnest(p_workflow_ids) with ordinality as i(id, n) on i.id = ins.workflow_id
   order by i.n;
  perform pg_notify('bitrix_sync_commands', '');
end $$;
comment on function bitrix_sync.issue_commands(uuid[], uuid[], text[], jsonb[], text[], text[], jsonb[]) is
  'issue_command() for a group of workflows in one call: element k of each array is the k-th call''s argument (null where issue_command() takes its default). Each workflow moves running -> waiting_crm (await_crm) under its lease token, with its step and step data, and gets its command; returns (ord, command) in the caller''s order. All or nothing: a stale lease, a workflow not running or named twice refuses the whole call (BS001, naming the first such workflow), as the same issue_command() calls in one transaction would. The step lane''s grouped issue.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.issue_commands(uuid[],uuid[],text[],jsonb[],text[],text[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the step lane issues a group''s commands with it).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
