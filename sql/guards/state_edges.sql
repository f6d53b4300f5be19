-- State machines (§6.1, §7.1, §7.2, §7.3, §6.3): the legal edges as data. The guard triggers
-- (sql/guards/transitions.sql) refuse any UPDATE of a state column not on this list, whoever
-- writes it; fire_workflow_event reads it too. docs/state-machines.md draws the same edges; a test
-- keeps the two equal.

create or replace view bitrix_sync.state_edges as
select machine, from_state, to_state, event
  from (values
    -- han_app.sync_queue (§6.1)
    ('sync_queue', 'pending', 'leased', 'claim'),
    ('sync_queue', 'retry_wait', 'leased', 'claim'),
    ('sync_queue', 'leased', 'processed', 'complete'),
    ('sync_queue', 'leased', 'retry_wait', 'retry'),
    ('sync_queue', 'leased', 'dead_letter', 'dead_letter'),
    ('sync_queue', 'leased', 'cancelled', 'cancel'),
    ('sync_queue', 'leased', 'pending', 'release'),
    ('sync_queue', 'retry_wait', 'pending', 'newer_intent'),
    ('sync_queue', 'pending', 'cancelled', 'cancel'),
    ('sync_queue', 'retry_wait', 'cancelled', 'cancel'),
    -- bitrix_sync.workflow_instances (§7.1)
    ('workflow', 'created', 'running', 'start'),
    ('workflow', 'created', 'cancelled', 'cancel'),
    ('workflow', 'running', 'waiting_crm', 'await_crm'),
    ('workflow', 'running', 'waiting_retry', 'schedule_retry'),
    ('workflow', 'running', 'waiting_manual', 'need_manual'),
    ('workflow', 'running', 'succeeded', 'succeed'),
    ('workflow', 'running', 'failed', 'fail'),
    ('workflow', 'running', 'cancelled', 'cancel'),
    ('workflow', 'waiting_crm', 'running', 'crm_replied'),
    ('workflow', 'waiting_crm', 'failed', 'fail'),
    ('workflow', 'waiting_crm', 'cancelled', 'cancel'),
    ('workflow', 'waiting_retry', 'running', 'retry_due'),
    ('workflow', 'waiting_retry', 'failed', 'fail'),
    ('workflow', 'waiting_retry', 'cancelled', 'cancel'),
    ('workflow', 'waiting_manual', 'running', 'manual_resume'),
    ('workflow', 'waiting_manual', 'failed', 'fail'),
    ('workflow', 'waiting_manual', 'cancelled', 'cancel'),
    -- An admin requeues the technical dead letter that failed it (requeue_dead_letter): it starts over.
    ('workflow', 'failed', 'waiting_retry', 'requeue'),
    -- bitrix_sync.crm_commands (§7.2)
    ('command', 'pending', 'leased', 'claim'),
    ('command', 'pending', 'dead_letter', 'abandon'),
    ('command', 'leased', 'in_flight', 'send'),
    ('command', 'leased', 'pending', 'release'),
    ('command', 'leased', 'retry_wait', 'retry'),
    ('command', 'leased', 'dead_letter', 'dead_letter'),
    ('command', 'in_flight', 'succeeded', 'complete'),
    ('command', 'in_flight', 'retry_wait', 'retry'),
    ('command', 'in_flight', 'uncertain', 'no_reply'),
    ('command', 'in_flight', 'dead_letter', 'dead_letter'),
    ('command', 'retry_wait', 'pending', 'due'),
    ('command', 'retry_wait', 'dead_letter', 'abandon'),
    ('command', 'uncertain', 'reconcile', 'reconcile'),
    ('command', 'reconcile', 'succeeded', 'complete'),
    ('command', 'reconcile', 'retry_wait', 'retry'),
    ('command', 'reconcile', 'dead_letter', 'dead_letter'),
    -- bitrix_sync.webhook_inbox (§7.3)
    ('webhook', 'received', 'coalesced', 'coalesce'),
    ('webhook', 'received', 'processing', 'claim'),
    ('webhook', 'retry_wait', 'processing', 'claim'),
    ('webhook', 'processing', 'processed', 'complete'),
    ('webhook', 'processing', 'retry_wait', 'retry'),
    ('webhook', 'processing', 'dead_letter', 'dead_letter'),
    ('webhook', 'coalesced', 'processed', 'covered'),
    -- bitrix_sync.entity_external_mapping (§6.3)
    ('mapping', 'active', 'closed', 'close'),
    ('mapping', 'active', 'broken', 'mark_broken'),
    -- bitrix_sync.business_alerts (§11)
    ('alert', 'open', 'resolved', 'resolve'),
    ('alert', 'open', 'closed', 'close'),
    ('alert', 'open', 'remote_missing', 'remote_missing'),
    -- bitrix_sync.rebind_requests (§5.4)
    ('rebind', 'requested', 'in_progress', 'start'),
    ('rebind', 'requested', 'cancelled', 'cancel'),
    ('rebind', 'requested', 'failed', 'fail'),
    ('rebind', 'in_progress', 'succeeded', 'succeed'),
    ('rebind', 'in_progress', 'failed', 'fail'),
    ('rebind', 'in_progress', 'cancelled', 'cancel'),
    -- bitrix_sync.settings_versions (§12.3)
    ('settings', 'draft', 'validated', 'validate'),
    ('settings', 'draft', 'rejected', 'validate'),
    ('settings', 'validated', 'active', 'activate'),
    ('settings', 'active', 'superseded', 'supersede')
  ) as e(machine, from_state, to_state, event);
comment on view bitrix_sync.state_edges is
  'Every legal state transition of every machine, named by its event. The guard triggers and docs/state-machines.md follow this list.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
