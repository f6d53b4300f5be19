-- Retention (issue 11; docs/admin.md): finished rows are deleted after retention.*_days, in batches of
-- at most retention.batch_size rows, each batch one short transaction of its own. The hourly
-- `retention` task (tasks/retention.ts, src/maintenance/retention.ts) calls retention_step() per
-- table until it says to stop; an admin can call the same functions from psql.

-- Workflows are swept, not searched. Most finished workflows past retention are kept for good (a
-- link's workflow, each user's newest), and they are the oldest: a batch that searched from the
-- oldest walked all of them before the first it could delete (21 s a batch at 1 M users,
-- docs/performance.md, "Scale"). The sweep examines at most 20 x retention.batch_size of them per
-- call, in (finished_at, id) order from where the last call stopped (retention_sweeps), and starts
-- again from the oldest once it has gone past the newest: every call is bounded whatever the
-- history, and a run that runs out of budget leaves the place for the next. A run that began in
-- the middle of a round goes round once more, so it sees every workflow (p_run_started_at). The
-- price: the kept workflows are read again each round (bench:scale prints a round's length).
create or replace function bitrix_sync._retention_sweep_workflows(p_run_started_at timestamptz)
returns table (deleted integer, more boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp set lock_timeout = '200ms' as $$
declare
  v_limit integer := (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_window integer := 20 * (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_place bitrix_sync.retention_sweeps;
  v_ids uuid[];
  v_last_at timestamptz;
  v_last_id uuid;
  v_deleted uuid[];
  v_deleted_last_at timestamptz;
  v_deleted_last_id uuid;
  v_count integer;
  v_round_started_at timestamptz;
begin
  -- One sweeper at a time: a second run's call waits at most lock_timeout, then is told 55P03.
  select * into v_place from bitrix_sync.retention_sweeps s where s.table_name = 'workflows' for update;
  if not found then
    insert into bitrix_sync.retention_sweeps (table_name) values ('workflows')
    on conflict (table_name) do nothing;
    select * into v_place from bitrix_sync.retention_sweeps s where s.table_name = 'workflows' for update;
  end if;
  -- A round starts when its first window runs.
  v_round_started_at := case when v_place.after_finished_at is null then now() else v_place.round_started_at end;
  -- The window: finished workflows past retention after the place, oldest first, through
  -- workflow_instances_finished_idx (an incremental sort by id within equal finish times).
  select array_agg(x.id order by x.finished_at, x.id),
         (array_agg(x.finished_at order by x.finished_at desc, x.id desc))[1],
         (array_agg(x.id order by x.finished_at desc, x.id desc))[1]
    into v_ids, v_last_at, v_last_id
    from (select w.id, w.finished_at from bitrix_sync.workflow_instances w
           where w.state in ('succeeded', 'failed', 'cancelled')
             and w.finished_at < (select bitrix_sync._retention_cutoff('retention.workflows_days'))
             and (v_place.after_finished_at is null
                  or (w.finished_at, w.id) > (v_place.after_finished_at, v_place.after_id))
           order by w.finished_at, w.id
           limit v_window) x;
  -- Those of the window nothing keeps, oldest first, at most a batch.
  select array_agg(w.id order by w.finished_at, w.id),
         (array_agg(w.finished_at order by w.finished_at desc, w.id desc))[1],
         (array_agg(w.id order by w.finished_at desc, w.id desc))[1]
    into v_deleted, v_deleted_last_at, v_deleted_last_id
    from (select w.id, w.finished_at from bitrix_sync.workflow_instances w
           where w.id = any(coalesce(v_ids, '{}'))
             and w.state in ('succeeded', 'failed', 'cancelled')
             and not exists (select 1 from bitrix_sync.crm_commands c where c.workflow_id = w.id)
             and exists (select 1 from bitrix_sync.workflow_instances n
                              where n.user_id = w.user_id and n.created_at > w.created_at)
             and not exists (select 1 from bitrix_sync.rebind_requests r where r.workflow_id = w.id)
             and not exists (select 1 from bitrix_sync.entity_external_mapping m where m.workflow_id = w.id)
             and not exists (select 1 from bitrix_sync.technical_dead_letters d
                              where d.resolved_at is null and d.workflow_id = w.id)
           order by w.finished_at, w.id
           limit v_limit
           for update skip locked) w;
  delete from bitrix_sync.workflow_instances w where w.id = any(coalesce(v_deleted, '{}'));
  get diagnostics v_count = row_count;
  if v_count >= v_limit then
    -- A full batch: the window may hold more to delete after the last one deleted.
    update bitrix_sync.retention_sweeps s
       set after_finished_at = v_deleted_last_at, after_id = v_deleted_last_id,
           round_started_at = v_round_started_at, updated_at = now()
     where s.table_name = 'workflows';
    return query select v_count, true;
  elsif coalesce(cardinality(v_ids), 0) >= v_window then
    -- A whole window examined: the sweep goes on after it.
    update bitrix_sync.retention_sweeps s
       set after_finished_at = v_last_at, after_id = v_last_id,
           round_started_at = v_round_started_at, updated_at = now()
     where s.table_name = 'workflows';
    return query select v_count, true;
  else
    -- Past the newest: the next call starts a new round from the oldest. The caller's run goes
    -- round again when this round started before it.
    update bitrix_sync.retention_sweeps s
       set after_finished_at = null, after_id = null, round_started_at = v_round_started_at,
           last_round_ended_at = now(), updated_at = now()
     where s.table_name = 'workflows';
    return query select v_count, coalesce(v_round_started_at < p_run_started_at, false);
  end if;
end $$;
comment on function bitrix_sync._retention_sweep_workflows(timestamptz) is
  'Internal: one window of the workflow retention sweep: examines at most 20 x retention.batch_size finished workflows past retention.workflows_days after the place in retention_sweeps, deletes those nothing keeps (at most retention.batch_size, FOR UPDATE SKIP LOCKED), and moves the place on; past the newest it starts a new round. Returns the rows deleted and whether to call again: the round goes on, or it started before p_run_started_at (the caller''s run has not seen every workflow yet; null: never).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._retention_sweep_workflows(timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.retention_step(p_table text, p_run_started_at timestamptz)
returns table (deleted integer, more boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_count integer;
begin
  if p_table = 'workflows' then
    return query select s.deleted, s.more from bitrix_sync._retention_sweep_workflows(p_run_started_at) s;
    return;
  end if;
  v_count := bitrix_sync.delete_retention_batch(p_table);
  return query select v_count, v_count > 0;
end $$;
comment on function bitrix_sync.retention_step(text, timestamptz) is
  'One retention step of one table (webhooks, commands, workflows, queue): the rows deleted and whether to call again. webhooks, commands and queue: one delete_retention_batch(), again while it deletes; workflows: one window of the sweep, again until a round that started at or after p_run_started_at (when the caller''s run began; pass the same value on every call of a run) has gone past the newest finished workflow. What the retention task calls; BS004 for another table.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.retention_step(text,timestamp with time zone)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one step of one table and whether to call again (security definer); the hourly task, or an admin now.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
