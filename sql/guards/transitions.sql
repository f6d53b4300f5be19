-- One guard trigger per table with a state column (§6.1, §7.1, §7.2, §7.3, §6.3): an UPDATE of
-- the state that is not an edge of bitrix_sync.state_edges is refused, whoever writes it.

create or replace function bitrix_sync.tg__guard_transition() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
-- TG_ARGV[0]: machine name in state_edges; TG_ARGV[1]: the state column.
declare
  v_from text;
  v_to text;
begin
  -- The status column by name (issue 14): turning both whole rows into JSON on every transition cost
  -- more than the rest of the guard. Another column name takes the generic way.
  if tg_argv[1] = 'status' then
    v_from := old.status;
    v_to := new.status;
  else
    v_from := to_jsonb(old) ->> tg_argv[1];
    v_to := to_jsonb(new) ->> tg_argv[1];
  end if;
  if v_from is distinct from v_to
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = v_from and e.to_state = v_to) then
    raise exception 'illegal % transition % -> %', tg_argv[0], v_from, v_to
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg__guard_transition() is
  'BEFORE UPDATE guard: refuses a change of the state column (TG_ARGV[1], read directly when it is status) that is not an edge of machine TG_ARGV[0] in bitrix_sync.state_edges. SQLSTATE BS002.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.tg_workflow_instances__guard_state() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  -- tg__guard_transition for the one machine whose column is "state" (TG_ARGV as there), reading it
  -- directly.
  if old.state is distinct from new.state
     and not exists (select 1 from bitrix_sync.state_edges e
                      where e.machine = tg_argv[0] and e.from_state = old.state and e.to_state = new.state) then
    raise exception 'illegal % transition % -> %', tg_argv[0], old.state, new.state
      using errcode = 'BS002',
            detail = format('table %I.%I', tg_table_schema, tg_table_name),
            hint = 'Move rows only through the bitrix_sync function for the event; docs/state-machines.md lists the legal edges.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg_workflow_instances__guard_state() is
  'BEFORE UPDATE OF state guard of workflow_instances: refuses a change of state that is not an edge of machine TG_ARGV[0] (workflow) in bitrix_sync.state_edges. SQLSTATE BS002.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

-- One guard per table. The legal edges of each machine are compiled into the trigger's WHEN clause
-- (issue 36): PostgreSQL evaluates it without calling the function, so a legal transition or an
-- UPDATE that leaves the state alone costs no PL/pgSQL call and no lookup in state_edges; only a
-- change not on the compiled list reaches the function, which refuses it unless state_edges (the
-- authority) has the edge. state_edges is a view of constants (sql/guards/state_edges.sql): a
-- migration that changes it includes this file too, and npm run db:check fails when it does not
-- (the WHEN clauses compiled here would differ). Written compactly (one text array, no IN list):
-- PostgreSQL reads a trigger's WHEN from its stored form for every UPDATE statement on the table.
-- drop/create keeps this file re-runnable.
do $$
declare
  g record;
  v_edges text[];
begin
  for g in
    select * from (values
      ('han_app', 'sync_queue', '_100_guard_status', 'status', 'sync_queue', 'tg__guard_transition', 'Refuses illegal queue status changes (bitrix_sync.state_edges).'),
      ('bitrix_sync', 'workflow_instances', '_100_guard_state', 'state', 'workflow', 'tg_workflow_instances__guard_state', 'Refuses illegal workflow state changes (§7.1).'),
      ('bitrix_sync', 'crm_commands', '_100_guard_status', 'status', 'command', 'tg__guard_transition', 'Refuses illegal command status changes (§7.2).'),
      ('bitrix_sync', 'webhook_inbox', '_100_guard_status', 'status', 'webhook', 'tg__guard_transition', 'Refuses illegal webhook status changes (§7.3).'),
      ('bitrix_sync', 'entity_external_mapping', '_100_guard_status', 'status', 'mapping', 'tg__guard_transition', 'closed and broken mappings are final.'),
      ('bitrix_sync', 'business_alerts', '_100_guard_status', 'status', 'alert', 'tg__guard_transition', 'Only open alerts change status.'),
      ('bitrix_sync', 'rebind_requests', '_100_guard_status', 'status', 'rebind', 'tg__guard_transition', 'Refuses illegal rebind request status changes (§5.4).'),
      ('bitrix_sync', 'settings_versions', '_100_guard_status', 'status', 'settings', 'tg__guard_transition', 'Only validated versions become active (§12.3).')
    ) as t(schema_name, table_name, trigger_name, column_name, machine, function_name, note)
  loop
    select coalesce(array_agg(e.edge order by e.edge), '{}') into v_edges
      from (select distinct from_state || '>' || to_state as edge from bitrix_sync.state_edges
             where machine = g.machine) e;
    execute format('drop trigger if exists %I on %I.%I', g.trigger_name, g.schema_name, g.table_name);
    -- WHEN: the column changes, and not along a compiled edge (null-safe: IS NOT TRUE).
    execute format('create trigger %I before update of %I on %I.%I for each row '
                   'when (old.%I is distinct from new.%I and ((old.%I)::text || ''>'' || (new.%I)::text = any (%L::text[])) is not true) '
                   'execute function bitrix_sync.%I(%L, %L)',
                   g.trigger_name, g.column_name, g.schema_name, g.table_name,
                   g.column_name, g.column_name, g.column_name, g.column_name, v_edges::text,
                   g.function_name, g.machine, g.column_name);
    execute format('comment on trigger %I on %I.%I is %L', g.trigger_name, g.schema_name, g.table_name,
                   g.note || ' The legal edges are compiled into WHEN: the function runs only for a change not on them.');
  end loop;
end $$;
