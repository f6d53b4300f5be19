-- Alert mirroring that recovers (§11, §7.2, issue 11). An alert command that fails before it is sent
-- or is refused for rate is retried like any command (retry_command: backoff and horizon). One that
-- got no answer is `uncertain`, and unlike a workflow's command no step is waiting for it, so the
-- alert lane recovers it here:
--   - an alert.update sets the same values again: it is sent again after the backoff, within the
--     command's retry horizon (uncertain -> reconcile -> retry_wait, or dead_letter past it);
--   - an alert.add may have created the item: it waits in `reconcile` while an alert.list looks the
--     item up by the alert's alert_number field (else its fingerprint field, else the item title,
--     which carries the alert number). Found: the add succeeded and the item is recorded. Not
--     found: the same add goes out again. The lookup failed for good: the add is dead-lettered
--     (alert_lookup_failed) and never re-sent blindly.
-- An add that may have landed and was never looked up (dead-lettered that way, then requeued or
-- raised again) is looked up before any new add too: one alert never gets two smart-process items.
-- src/alerts/recover.ts drives these functions; src/workflows/pump.ts settles the commands.

create or replace function bitrix_sync._alert_add_unsafe(p_alert_id bigint) returns boolean
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- An add whose item may exist, and that no successful lookup has checked since it was sent.
  select exists (
    select 1 from bitrix_sync.crm_commands a
     where a.alert_id = p_alert_id and a.command_type = 'alert.add'
       and (a.status in ('uncertain', 'reconcile')
            or (a.status = 'dead_letter' and a.last_error_code = 'alert_lookup_failed'))
       and a.id > coalesce((select max(l.id) from bitrix_sync.crm_commands l
                             where l.alert_id = p_alert_id and l.command_type = 'alert.list'
                               and l.status = 'succeeded' and l.params ->> 'purpose' = 'find'), 0))
$$;
comment on function bitrix_sync._alert_add_unsafe(bigint) is
  'Internal: an alert.add of this alert may have created an item that no lookup has seen since: a new add must wait for an alert.list lookup.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._alert_add_unsafe(bigint)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the alert mirror (runAlertSync asks it before an add).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.recover_alert_command(p_id bigint, p_delay interval)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  -- No lease: an uncertain command has none. The row lock and the status test fence two lanes
  -- that pick the same command; the second gets null and moves on.
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and alert_id is not null and status = 'uncertain'
   for update skip locked;
  if not found then
    return null;
  end if;
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  if v_row.command_type = 'alert.add' then
    -- Waits for issue_alert_lookup() / resolve_alert_lookup().
    perform pg_notify('bitrix_sync_workflows', '');
    return v_row;
  end if;
  -- alert.update (and any read): sending the same values again cannot duplicate anything.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', null, null);
    perform bitrix_sync.mark_alert_mirror_failed(v_row.alert_id);
    return v_row;
  end if;
  update bitrix_sync.crm_commands
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'), deadline_at = v_deadline
   where id = p_id
  returning * into v_row;
  perform pg_notify('bitrix_sync_commands', '');
  return v_row;
end $$;
comment on function bitrix_sync.recover_alert_command(bigint, interval) is
  'An unanswered alert command: uncertain -> reconcile. An alert.add then waits for a lookup of its item; an alert.update goes on to retry_wait after p_delay, or to dead_letter (retry_horizon_exceeded, technical DLQ row, alert failed) past its horizon. Returns null when the command is not uncertain any more (another lane took it).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.recover_alert_command(bigint,interval)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Alert mirroring: an unanswered alert command moves on (sql/alert_mirror.sql).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.alerts_to_look_up(p_limit integer)
returns table (alert_id bigint, alert_number bigint, alert_type text, fingerprint text)
language sql stable set search_path = pg_catalog, pg_temp as $$
  select a.id, a.alert_number, a.alert_type::text, a.fingerprint::text
    from bitrix_sync.business_alerts a
   where a.id in (
           -- an unanswered add waiting for its lookup
           select c.alert_id from bitrix_sync.crm_commands c
            where c.command_type = 'alert.add' and c.status = 'reconcile' and c.alert_id is not null
           union
           -- a change to send, no item yet, and an earlier add that may have landed
           select u.id from bitrix_sync.business_alerts u
            where u.crm_sync_status = 'pending' and u.item_id is null and bitrix_sync._alert_add_unsafe(u.id))
     and not exists (select 1 from bitrix_sync.crm_commands l
                      where l.alert_id = a.id and l.command_type = 'alert.list'
                        and l.status in ('pending', 'leased', 'in_flight', 'retry_wait'))
   order by a.id
   limit greatest(p_limit, 1)
$$;
comment on function bitrix_sync.alerts_to_look_up(integer) is
  'Alerts whose item must be looked up before anything else is sent: an alert.add in reconcile, or a pending alert without an item whose earlier add may have landed; none with a lookup already under way.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.alerts_to_look_up(integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: items to look up.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.issue_alert_lookup(p_alert_id bigint, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  if p_params is null or p_params ->> 'purpose' is distinct from 'find' or jsonb_typeof(p_params -> 'match') <> 'object' then
    raise exception 'an alert lookup needs params {entityTypeId, purpose: "find", match: {field, value}}'
      using errcode = 'BS004', hint = 'Build it with lookupMatch() of src/alerts/recover.ts.';
  end if;
  -- One lookup at a time per alert: the alert row is the lock.
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  if exists (select 1 from bitrix_sync.crm_commands l
              where l.alert_id = p_alert_id and l.command_type = 'alert.list'
                and l.status in ('pending', 'leased', 'in_flight', 'retry_wait')) then
    return null;
  end if;
  return bitrix_sync.issue_alert_command(p_alert_id, 'alert.list', p_params);
end $$;
comment on function bitrix_sync.issue_alert_lookup(bigint, jsonb) is
  'Queues an alert.list that looks for the alert''s item by its alert_number or fingerprint field, or its title (params.purpose = find). Returns null when a lookup of that alert is already under way.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.issue_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup of an item.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.resolve_alert_lookup(p_alert_id bigint, p_items jsonb)
returns text
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_item bigint;
  v_stage text;
  v_add bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  if p_items is null or jsonb_typeof(p_items) <> 'array' then
    raise exception 'lookup items must be a JSON array of {id, stage_id}'
      using errcode = 'BS004', hint = 'Pass what the alert.list returned, e.g. ''[{"id": 7, "stage_id": "DT1040_7:NEW"}]''.';
  end if;
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  -- A fingerprint repeats across an alert and the ones that follow it after a terminal stage; an
  -- item another alert already owns is not this alert's.
  select (i ->> 'id')::bigint, i ->> 'stage_id' into v_item, v_stage
    from jsonb_array_elements(p_items) i
   where not exists (select 1 from bitrix_sync.business_alerts b
                      where b.item_id = (i ->> 'id')::bigint and b.id <> p_alert_id)
   order by (i ->> 'id')::bigint
   limit 1;
  if v_item is not null then
    perform bitrix_sync.record_alert_item(p_alert_id, v_item, v_stage);
  end if;
  for v_add in
    select * from bitrix_sync.crm_commands
     where alert_id = p_alert_id and command_type = 'alert.add' and status = 'reconcile'
     order by id
     for update
  loop
    if v_item is not null then
      update bitrix_sync.crm_commands
         set status = 'succeeded', completed_at = now(), last_error_code = null,
             response = jsonb_build_object('item_id', v_item, 'stage_id', v_stage, 'recovered', true)
       where id = v_add.id;
    else
      -- The lookup proved the add did not land: the same add goes out again, within its horizon.
      v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_add));
      if now() > v_deadline then
        perform bitrix_sync._dead_letter_command_row(v_add, 'retry_horizon_exceeded', null, null);
        perform bitrix_sync.mark_alert_mirror_failed(p_alert_id);
      else
        update bitrix_sync.crm_commands
           set status = 'retry_wait', next_attempt_at = now(), last_error_code = 'reconciled_not_applied',
               deadline_at = v_deadline
         where id = v_add.id;
        perform pg_notify('bitrix_sync_commands', '');
      end if;
    end if;
  end loop;
  return case when v_item is null then 'not_found' else 'found' end;
end $$;
comment on function bitrix_sync.resolve_alert_lookup(bigint, jsonb) is
  'The outcome of an alert''s item lookup (called in the lookup''s completion transaction): an item that no other alert owns is recorded on the alert and the alert.add waiting in reconcile succeeds with it; no such item: the waiting add goes back to retry_wait and is sent again (dead_letter past its horizon). Returns found or not_found.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.resolve_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup''s outcome.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.fail_alert_lookup(p_alert_id bigint)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_add bitrix_sync.crm_commands;
  v_count integer := 0;
begin
  perform 1 from bitrix_sync.business_alerts where id = p_alert_id for update;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  for v_add in
    select * from bitrix_sync.crm_commands
     where alert_id = p_alert_id and command_type = 'alert.add' and status = 'reconcile'
     for update
  loop
    perform bitrix_sync._dead_letter_command_row(v_add, 'alert_lookup_failed', null, null);
    v_count := v_count + 1;
  end loop;
  -- Until someone looks, nothing may be sent for this alert: an add could make a second item.
  update bitrix_sync.business_alerts set crm_sync_status = 'failed'
   where id = p_alert_id and crm_sync_status <> 'failed';
  return v_count;
end $$;
comment on function bitrix_sync.fail_alert_lookup(bigint) is
  'The lookup of an alert''s item failed for good: the alert.adds waiting in reconcile go to dead_letter (alert_lookup_failed) with a technical DLQ row, and the alert is marked failed (visible in status_alert_mirror) until an admin requeues it, which looks the item up again before anything is added. Returns how many adds.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.fail_alert_lookup(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: a lookup that failed for good.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
