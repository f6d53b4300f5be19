-- A variant for BENCH_SETUP_SQL (npm run bench:engine, bench:peers): migration 000049's set-based
-- steps undone on a database at 000049, so the two can be run alternately in one session. The step
-- lane still sends a group's issues, transitions and links as one call of issue_commands(),
-- fire_workflow_events() and open_mappings() (their set forms); here those calls run
-- issue_command(), fire_workflow_event() and open_mapping() once per element, in order, which is
-- what the grouped form did before
-- 000049 (a lateral join calling the function per parameter set). docs/performance.md, "Issue 36,
-- fourth round".
set jit = off;
create or replace function bitrix_sync.issue_commands(
  p_workflow_ids uuid[], p_lease_tokens uuid[], p_command_types text[], p_params jsonb[], p_steps text[],
  p_trace_contexts text[], p_step_data jsonb[]
) returns table (ord integer, command bitrix_sync.crm_commands)
language sql set search_path = pg_catalog, pg_temp as $$
  select i.n::integer, bitrix_sync.issue_command(i.id, i.token, i.command_type, i.params, i.step, i.trace_context, i.step_data)
    from unnest(p_workflow_ids, p_lease_tokens, p_command_types, p_params, p_steps, p_trace_contexts, p_step_data)
           with ordinality as i(id, token, command_type, params, step, trace_context, step_data, n)
   order by i.n
$$;
create or replace function bitrix_sync.fire_workflow_events(
  p_ids uuid[], p_lease_tokens uuid[], p_events text[], p_changes jsonb[]
) returns table (ord integer, workflow bitrix_sync.workflow_instances)
language sql set search_path = pg_catalog, pg_temp as $$
  select i.n::integer, bitrix_sync.fire_workflow_event(i.id, i.token, i.event, coalesce(i.changes, '{}'::jsonb))
    from unnest(p_ids, p_lease_tokens, p_events, p_changes) with ordinality as i(id, token, event, changes, n)
   order by i.n
$$;
create or replace function bitrix_sync.open_mappings(p_user_ids uuid[], p_contact_ids text[], p_workflow_ids uuid[])
returns table (ord integer, mapping bitrix_sync.entity_external_mapping)
language sql set search_path = pg_catalog, pg_temp as $$
  select i.n::integer, bitrix_sync.open_mapping(i.user_id, i.contact_id, i.workflow_id)
    from unnest(p_user_ids, p_contact_ids, p_workflow_ids) with ordinality as i(user_id, contact_id, workflow_id, n)
   order by i.n
$$;
