-- Retention (issue 11; docs/admin.md): what the next run would delete, for an admin, by hand.

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.retention_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Retention: what the next run would delete (reads the history: by hand only).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
