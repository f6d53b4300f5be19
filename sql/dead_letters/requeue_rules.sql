-- Technical dead letters an admin can act on (§9, issue 11; recipes in docs/admin.md): what a requeue
-- of an entry would do, or why it is refused, and which open entries one restart answers.
--   sync_queue  a new pending intent row with the same task, user and payload (fresh horizon);
--   webhook     a new inbox event for the same entity (event_type requeue; fresh horizon);
--   workflow / a workflow's crm_command
--               the failed workflow starts over from its first step (failed -> waiting_retry,
--               requeue): every step reads again and issues its command as a new row, so a write
--               is never re-sent blindly; its horizon counts from the requeue;
--   an alert's crm_command
--               the alert is mirrored again (crm_sync_status failed -> pending): a new command,
--               preceded by a lookup when an earlier add may have created the item.
-- Entries that one restart covers (the same workflow, the same alert) are resolved together.

create or replace function bitrix_sync._open_dead_letter(p_id bigint) returns bitrix_sync.technical_dead_letters
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.technical_dead_letters;
begin
  select * into v_row from bitrix_sync.technical_dead_letters where id = p_id for update;
  if not found then
    raise exception 'technical dead letter % does not exist', p_id
      using errcode = 'BS040', hint = 'List them with: select * from bitrix_sync.list_dead_letters();';
  end if;
  if v_row.resolved_at is not null then
    raise exception 'technical dead letter % was already % by % at %', p_id, v_row.resolution, v_row.resolved_by,
                    to_char(v_row.resolved_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
      using errcode = 'BS041',
            hint = case when v_row.resolution = 'requeued'
                        then format('Its new attempt is %s; follow that instead.', v_row.requeued_to)
                        else 'Nothing to do: a resolved dead letter stays resolved.' end;
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._open_dead_letter(bigint) is
  'Internal: the open dead letter, locked; BS040 when there is none with that id, BS041 when it is already resolved.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._open_dead_letter(bigint)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._requeue_refusal(p_dl bitrix_sync.technical_dead_letters) returns jsonb
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
  v_alert bitrix_sync.business_alerts;
  v_newer text;
  v_ack constant text := 'If nothing needs to run again, acknowledge it: select * from bitrix_sync.acknowledge_dead_letter(<id>, ''ops:<you>'', ''<why>'');';
begin
  if p_dl.source = 'sync_queue' then
    if p_dl.source_id ~ '^[0-9a-f-]{36}$' then
      select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid;
    end if;
    if v_q.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent row no longer exists', 'hint', v_ack);
    elsif v_q.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its intent row is %s, not dead_letter', v_q.status), 'hint', v_ack);
    elsif v_q.task_type not in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind') then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent is of a task type the service does not run', 'hint', v_ack);
    elsif exists (select 1 from han_app.sync_queue a
                   where a.dedup_key = v_q.dedup_key and a.status in ('pending', 'leased', 'retry_wait')) then
      return jsonb_build_object('code', 'BS042', 'message', 'a newer intent of the same kind for the same user is queued and carries this one', 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.source = 'webhook' then
    if p_dl.source_id ~ '^[0-9]{1,18}$' then
      select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint;
    end if;
    if v_hook.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its inbox event no longer exists', 'hint', v_ack);
    elsif v_hook.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its inbox event is %s, not dead_letter', v_hook.status), 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.workflow_id is not null then
    select * into v_wf from bitrix_sync.workflow_instances where id = p_dl.workflow_id;
    if not found then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow no longer exists', 'hint', v_ack);
    elsif v_wf.state in ('succeeded', 'cancelled') then
      return jsonb_build_object('code', 'BS042', 'message', format('its workflow finished as %s without it', v_wf.state), 'hint', v_ack);
    elsif v_wf.state <> 'failed' then
      return jsonb_build_object('code', 'BS043',
        'message', format('its workflow is still %s: its own retries, or an admin''s decision on a parked workflow, move it on', v_wf.state),
        'hint', 'Wait until the workflow has failed or finished (bitrix_sync.status_workflows), then requeue or acknowledge.');
    end if;
    select w.state into v_newer from bitrix_sync.workflow_instances w
     where w.user_id = v_wf.user_id and w.created_at > v_wf.created_at and w.id <> v_wf.id
     order by w.created_at desc limit 1;
    if v_newer in ('succeeded', 'failed', 'cancelled') then
      return jsonb_build_object('code', 'BS042',
        'message', 'a newer workflow of the same user has run since; running this older one again could undo it',
        'hint', v_ack);
    elsif v_newer is not null then
      return jsonb_build_object('code', 'BS043', 'message', 'a newer workflow of the same user is running',
        'hint', 'Wait until it finishes; it reads the user''s current data, so it usually makes this dead letter moot. Then acknowledge or requeue.');
    end if;
    if v_wf.workflow_type = 'contact.rebind' and not exists (
         select 1 from bitrix_sync.rebind_requests r
          where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its rebind request is finished; a rebind is not run again by a requeue',
        'hint', 'Ask again with select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''<Contact ID>'', ''<why>'', ''ops:<you>''); then acknowledge this dead letter.');
    end if;
    if exists (select 1 from bitrix_sync.crm_commands c
                where c.workflow_id = v_wf.id and c.status in ('uncertain', 'reconcile')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow has a write whose outcome is still unknown',
        'hint', v_ack);
    end if;
    return null;
  end if;

  -- A command of a business alert.
  select * into v_cmd from bitrix_sync.crm_commands where id = p_dl.command_id;
  if not found or v_cmd.alert_id is null then
    return jsonb_build_object('code', 'BS042', 'message', 'its command no longer exists', 'hint', v_ack);
  end if;
  select * into v_alert from bitrix_sync.business_alerts where id = v_cmd.alert_id;
  if v_alert.status = 'remote_missing' then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert''s smart-process item was deleted in the CRM', 'hint', v_ack);
  end if;
  if exists (select 1 from bitrix_sync.crm_commands n
              where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list'
                and n.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')) then
    return jsonb_build_object('code', 'BS043', 'message', 'a newer command of the same alert is under way',
      'hint', 'Wait for it (bitrix_sync.status_alert_mirror); if it succeeds, acknowledge this dead letter.');
  end if;
  if v_alert.crm_sync_status = 'synced' and exists (
       select 1 from bitrix_sync.crm_commands n
        where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list' and n.status = 'succeeded') then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert has been mirrored since', 'hint', v_ack);
  end if;
  return null;
end $$;
comment on function bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters) is
  'Internal: why a dead letter cannot be requeued now, as {code, message, hint} (BS042 nothing to run again, BS043 something else is running), or null when it can.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._requeue_target(p_dl bitrix_sync.technical_dead_letters) returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_id text;
  v_alert bigint;
begin
  -- han_app.sync_queue and its journal are still the project's (docs/security.md, "The App's tables").
  perform bitrix_sync._check_queue_tables();
  if p_dl.source = 'sync_queue' then
    select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid for update;
    -- The same intent as a new row: created now, so its horizon and the cutover watermark count from now.
    insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, payload_json)
    values (v_q.task_type, v_q.entity_type, v_q.entity_id, v_q.dedup_key, v_q.payload_json)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_queue', v_q.task_type);
    return 'sync_queue:' || v_id;
  end if;

  if p_dl.source = 'webhook' then
    select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint for update;
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    values (v_hook.receiver, 'requeue', v_hook.entity_type_id, v_hook.entity_id)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_webhooks', v_hook.receiver);
    return 'webhook:' || v_id;
  end if;

  if p_dl.workflow_id is not null then
    -- failed -> waiting_retry (requeue): due now, from its first step, with a horizon of its own.
    update bitrix_sync.workflow_instances
       set state = 'waiting_retry', current_step = 'start', step_data = '{}'::jsonb, outcome = null,
           last_error_code = null, finished_at = null, requeued_at = now(), next_attempt_at = now(),
           attempt_count = 0, deadline_at = bitrix_sync._retry_deadline(now()),
           lease_token = null, locked_by = null, locked_until = null
     where id = p_dl.workflow_id and state = 'failed';
    perform pg_notify('bitrix_sync_workflows', '');
    return 'workflow:' || p_dl.workflow_id::text;
  end if;

  select c.alert_id into v_alert from bitrix_sync.crm_commands c where c.id = p_dl.command_id;
  -- The mirror sends the alert's current state again; an add that may have landed is looked up first.
  update bitrix_sync.business_alerts set crm_sync_status = 'pending'
   where id = v_alert and crm_sync_status <> 'pending';
  perform pg_notify('bitrix_sync_workflows', '');
  return 'alert:' || v_alert::text;
end $$;
comment on function bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters) is
  'Internal (requeue_dead_letter, after _requeue_refusal said yes): starts the new attempt and returns what carries it (sync_queue:<id>, webhook:<id>, workflow:<id>, alert:<id>).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._covered_dead_letters(p_dl bitrix_sync.technical_dead_letters) returns bigint[]
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- The open entries one new attempt answers: the workflow's, or the alert's, or just this one.
  select coalesce(array_agg(d.id order by d.id), array[p_dl.id])
    from bitrix_sync.technical_dead_letters d
   where d.resolved_at is null
     and (d.id = p_dl.id
          or (p_dl.workflow_id is not null and d.workflow_id = p_dl.workflow_id)
          or (p_dl.source = 'crm_command' and p_dl.workflow_id is null and d.source = 'crm_command'
              and d.command_id in (select c.id from bitrix_sync.crm_commands c
                                    where c.alert_id = (select x.alert_id from bitrix_sync.crm_commands x
                                                         where x.id = p_dl.command_id))))
$$;
comment on function bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters) is
  'Internal: the ids of the open dead letters a requeue of p_dl answers: every open entry of its workflow, or of its alert''s commands, or p_dl alone.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
