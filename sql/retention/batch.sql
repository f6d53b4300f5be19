-- Retention (issue 11; docs/admin.md): one batch of finished rows of one table.
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

-- Pinned like every function, so never inlined: the callers below read it as a scalar subquery,
-- evaluated once per statement rather than once per row.
create or replace function bitrix_sync._retention_cutoff(p_key text) returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  select now() - make_interval(days => (bitrix_sync._active_setting(p_key) #>> '{}')::integer)
$$;
comment on function bitrix_sync._retention_cutoff(text) is
  'Internal: now minus the retention.*_days setting p_key: rows finished before it may be deleted.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._retention_cutoff(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.delete_retention_batch(p_table text)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set lock_timeout = '200ms' as $$
declare
  v_limit integer := (bitrix_sync._active_setting('retention.batch_size') #>> '{}')::integer;
  v_ids bigint[];
  v_uuids uuid[];
  v_count integer;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.delete_retention_batch(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one batch of finished rows (security definer: nobody holds DELETE on those tables); the hourly task, or an admin now.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
