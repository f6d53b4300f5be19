-- Retention (issue 11; docs/admin.md): finished rows are deleted after retention.*_days, in batches of
-- at most retention.batch_size rows, each batch one short transaction of its own. The hourly
-- `retention` task (tasks/retention.ts, src/maintenance/retention.ts) calls delete_retention_batch()
-- per table until a batch deletes nothing; an admin can call the same function from psql.
--
-- Locks: a batch picks its rows with FOR UPDATE SKIP LOCKED (a row someone holds is left for the
-- next run, never waited for) and runs with lock_timeout 200ms, so it never queues behind, or
-- holds up, the App's writes to han_app.sync_queue: the App inserts new rows and updates active
-- ones; a batch touches only finished ones, and only their row locks, for milliseconds.
--
-- Kept whatever their age (audit): mappings and their history, rebind requests, settings versions,
-- business alerts, the cutover, technical dead letters; and every row an open dead letter or an
-- unfinished workflow still refers to, a user's newest workflow (it lets an equal intent be
-- skipped), the workflows of mappings and rebind requests, and the commands of an alert whose item
-- is not known yet (they decide whether an add may have landed).

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

-- Pinned like every function, so never inlined: the callers below read it as a scalar subquery,
-- evaluated once per statement rather than once per row.
create or replace function bitrix_sync._retention_cutoff(p_key text) returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  select now() - make_interval(days => (bitrix_sync._active_setting(p_key) #>> '{}')::integer)
$$;
comment on function bitrix_sync._retention_cutoff(text) is
  'Internal: now minus the retention.*_days setting p_key: rows finished before it may be deleted.';

create or replace function bitrix_sync.delete_retention_batch(p_table text)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set lock_timeout = '200ms' as $$
declare
  v_limit integer := (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_ids bigint[];
  v_uuids uuid[];
  v_count integer;
begin
  case p_table
    when 'webhooks' then
      -- Processed events (coalesced ones are processed with the event that covered them), and
      -- dead-lettered ones no open dead letter refers to any more. An event others were coalesced
      -- into goes after them (the foreign key), so a batch never grows past its size: a flood of
      -- one Contact is thousands of events coalesced into a few.
      select array_agg(w.id) into v_ids
        from (select w.id from bitrix_sync.webhook_inbox w
               where w.status = 'processed'
                 and w.processed_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days'))
                 and not exists (select 1 from bitrix_sync.webhook_inbox c where c.coalesced_into = w.id)
               order by w.processed_at
               limit v_limit
               for update skip locked) w;
      if coalesce(cardinality(v_ids), 0) < v_limit then
        select coalesce(v_ids, '{}') || coalesce(array_agg(w.id), '{}') into v_ids
          from (select w.id from bitrix_sync.webhook_inbox w
                 where w.status = 'dead_letter'
                   and w.status_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days'))
                   and not exists (select 1 from bitrix_sync.webhook_inbox c where c.coalesced_into = w.id)
                   and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                    where d.resolved_at is null and d.source = 'webhook' and d.source_id = w.id::text)
                 order by w.id
                 limit v_limit - coalesce(cardinality(v_ids), 0)
                 for update skip locked) w;
      end if;
      delete from bitrix_sync.webhook_inbox w where w.id = any(v_ids);
    when 'commands' then
      select array_agg(c.id) into v_ids
        from (select c.id from bitrix_sync.crm_commands c
                left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
                left join bitrix_sync.business_alerts a on a.id = c.alert_id
               where c.completed_at < (select bitrix_sync._retention_cutoff('retention.commands_days'))
                 and c.status in ('succeeded', 'dead_letter')
                 and (c.workflow_id is null or w.state in ('succeeded', 'failed', 'cancelled'))
                 and (c.alert_id is null or a.item_id is not null)
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null
                                    and (d.command_id = c.id or d.workflow_id = c.workflow_id))
               order by c.completed_at
               limit v_limit
               for update of c skip locked) c;
      delete from bitrix_sync.crm_commands c where c.id = any(v_ids);
    when 'workflows' then
      -- One window of the sweep (_retention_sweep_workflows): the rows it deletes, nothing else.
      select s.deleted into v_count from bitrix_sync._retention_sweep_workflows(null) s;
      return v_count;
    when 'queue' then
      -- Oldest first through sync_queue_finished_idx (migration 000033), whose predicate this one
      -- repeats: without it the batch read the whole queue's history to find its rows.
      select array_agg(q.id) into v_uuids
        from (select q.id from han_app.sync_queue q
               where q.status in ('processed', 'cancelled', 'dead_letter')
                 and q.completed_at < (select bitrix_sync._retention_cutoff('retention.queue_days'))
                 and not exists (select 1 from bitrix_sync.technical_dead_letters d
                                  where d.resolved_at is null and d.source = 'sync_queue' and d.source_id = q.id::text)
                 and q.id not in (select w.source_task_id from bitrix_sync.workflow_instances w
                                   where w.state not in ('succeeded', 'failed', 'cancelled')
                                     and w.source_task_id is not null)
               order by q.completed_at
               limit v_limit
               for update skip locked) q;
      delete from han_app.sync_queue q where q.id = any(v_uuids);
    else
      raise exception 'retention knows the tables webhooks, commands, workflows and queue, not %', p_table
        using errcode = 'BS004', hint = 'Example: select bitrix_sync.delete_retention_batch(''webhooks'');';
  end case;
  get diagnostics v_count = row_count;
  return v_count;
end $$;
comment on function bitrix_sync.delete_retention_batch(text) is
  'Deletes one batch (at most retention.batch_size rows) of finished rows of one table past its retention.*_days: webhooks (processed; dead-lettered with no open dead letter; an event others were coalesced into after them), commands (succeeded or dead-lettered, of finished workflows or of alerts with an item, with no open dead letter), workflows (finished, commands gone, not the user''s newest, not referred to by a mapping, a rebind request or an open dead letter; one window of the sweep that remembers its place, so 0 may leave deletable workflows further on: retention_step() says whether the sweep went round) or queue (processed, cancelled or dead-lettered intents no open dead letter or unfinished workflow refers to). Rows are picked FOR UPDATE SKIP LOCKED under lock_timeout 200ms. Returns rows deleted; call again until it returns 0.';

create or replace function bitrix_sync.retention_preview()
returns table (table_name text, deletable bigint, oldest_finished_at timestamptz, kept_days integer)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select 'webhooks', count(*), min(coalesce(w.processed_at, w.status_at)),
         (bitrix_sync._active_setting('retention.webhooks_days') #>> '{}')::integer
    from bitrix_sync.webhook_inbox w
   where (w.status = 'processed' and w.processed_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days')))
      or (w.status = 'dead_letter' and w.status_at < (select bitrix_sync._retention_cutoff('retention.webhooks_days'))
          and not exists (select 1 from bitrix_sync.technical_dead_letters d
                           where d.resolved_at is null and d.source = 'webhook' and d.source_id = w.id::text))
  union all
  select 'commands', count(*), min(c.completed_at),
         (bitrix_sync._active_setting('retention.commands_days') #>> '{}')::integer
    from bitrix_sync.crm_commands c
    left join bitrix_sync.workflow_instances w on w.id = c.workflow_id
    left join bitrix_sync.business_alerts a on a.id = c.alert_id
   where c.completed_at < (select bitrix_sync._retention_cutoff('retention.commands_days'))
     and c.status in ('succeeded', 'dead_letter')
     and (c.workflow_id is null or w.state in ('succeeded', 'failed', 'cancelled'))
     and (c.alert_id is null or a.item_id is not null)
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and (d.command_id = c.id or d.workflow_id = c.workflow_id))
  union all
  -- Workflows whose commands go in the same run count too: they are deleted right after them.
  select 'workflows', count(*), min(w.finished_at),
         (bitrix_sync._active_setting('retention.workflows_days') #>> '{}')::integer
    from bitrix_sync.workflow_instances w
   where w.state in ('succeeded', 'failed', 'cancelled')
     and w.finished_at < (select bitrix_sync._retention_cutoff('retention.workflows_days'))
     and not exists (select 1 from bitrix_sync.crm_commands c
                      where c.workflow_id = w.id
                        and (c.completed_at is null
                             or c.completed_at >= (select bitrix_sync._retention_cutoff('retention.commands_days'))
                             or exists (select 1 from bitrix_sync.technical_dead_letters d
                                         where d.resolved_at is null and d.command_id = c.id)))
     and exists (select 1 from bitrix_sync.workflow_instances n
                      where n.user_id = w.user_id and n.created_at > w.created_at)
     and not exists (select 1 from bitrix_sync.rebind_requests r where r.workflow_id = w.id)
     and not exists (select 1 from bitrix_sync.entity_external_mapping m where m.workflow_id = w.id)
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and d.workflow_id = w.id)
  union all
  select 'queue', count(*), min(q.completed_at),
         (bitrix_sync._active_setting('retention.queue_days') #>> '{}')::integer
    from han_app.sync_queue q
   where q.status in ('processed', 'cancelled', 'dead_letter')
     and q.completed_at < (select bitrix_sync._retention_cutoff('retention.queue_days'))
     and not exists (select 1 from bitrix_sync.technical_dead_letters d
                      where d.resolved_at is null and d.source = 'sync_queue' and d.source_id = q.id::text)
     and q.id not in (select w.source_task_id from bitrix_sync.workflow_instances w
                       where w.state not in ('succeeded', 'failed', 'cancelled') and w.source_task_id is not null)
$$;
comment on function bitrix_sync.retention_preview() is
  'Admin: what the next retention run would delete, per table (webhooks, commands, workflows, queue): how many rows, the oldest finish time among them and the retention.*_days in force. Reads only; counts the history, so run it by hand, not from a scrape.';

-- Privileges: sql/privileges.sql.
