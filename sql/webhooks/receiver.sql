-- Robot webhook receivers (§10.1, docs/receivers.md): the statement the receivers run. The HTTP
-- layer has already checked the token, the form and the portal identity; accept_webhooks() checks
-- what only the database knows (the alert smart process's entityTypeId, a hot setting) and inserts
-- the inbox rows, all in the statement's own transaction. The receiver sends the requests that
-- arrive together as one call (one round trip and one commit for all of them) and answers each
-- only after that commit; a refused event gets a refusal code and leaves no row.
--
-- Why grouped: PostgreSQL serialises the commits of transactions that NOTIFY (one global lock held
-- across the WAL flush). One row per transaction through record_webhook() (insert + NOTIFY)
-- measured 545 accepted requests/s against 2 600/s for a plain insert (pgbench, 16 clients, 2
-- cores); an add_job with a job_key per request, 262/s. So the wake-up for the sync loop's LISTEN
-- (bitrix_sync_webhooks, as record_webhook sends it) is sent once per call and receiver, whatever
-- the number of rows. The loop's fallback poll covers a lost wake-up (§8).
--
-- Refusal codes (accept_webhooks) and errors (accept_webhook, for psql): entity_type / BS020 the
-- entity type is not the receiver's (the HTTP layer answers 400), entity_id / BS004 the entity ID is
-- not a numeric ID (400), alert_entity_type_unset / BS021 alerts.entity_type_id is not set (503),
-- alert_config_invalid / BS023 it is set but unusable (503), unknown_receiver / BS022 a bug in the
-- caller (503). Each is decided per event, so one event or one receiver never costs the others of
-- the call: the checks below cover every CHECK of webhook_inbox, so an insert cannot fail on the
-- event's data. Only BS004 for arrays of different lengths (no event can be told apart) fails the
-- whole call, as does the database itself failing.

create or replace function bitrix_sync.accept_webhooks(
  p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[],
  p_trace_contexts text[] default null
) returns table (ord integer, inbox_id bigint, refusal text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer := coalesce(cardinality(p_receivers), 0);
  v_alert_type integer;
  v_alert_refusal text;
  v_expected integer;
  v_contact boolean := false;
  v_alert boolean := false;
begin
  if coalesce(cardinality(p_entity_type_ids), 0) <> v_n or coalesce(cardinality(p_entity_ids), 0) <> v_n
     or coalesce(cardinality(p_source_ips), 0) <> v_n or v_n > 1000
     or (p_trace_contexts is not null and cardinality(p_trace_contexts) <> v_n) then
    raise exception 'accept_webhooks needs four (or five) arrays of one length, at most 1000'
      using errcode = 'BS004', hint = 'Pass receiver, entity type, entity ID, source IP and optionally trace context per event, in that order.';
  end if;
  if 'alert' = any(p_receivers) then
    begin
      v_alert_type := bitrix_sync.alert_entity_type_id();
      if v_alert_type is null then
        v_alert_refusal := 'alert_entity_type_unset';
      end if;
    exception when others then
      -- A broken alert setting stops the alert receiver only; Contact events of the call go on.
      v_alert_refusal := 'alert_config_invalid';
    end;
  end if;
  for i in 1 .. v_n loop
    ord := i;
    inbox_id := null;
    refusal := null;
    v_expected := null;
    if p_receivers[i] = 'contact' then
      v_expected := 3;
    elsif p_receivers[i] = 'alert' then
      v_expected := v_alert_type;
      refusal := v_alert_refusal;
    else
      refusal := 'unknown_receiver';
    end if;
    if refusal is null and p_entity_type_ids[i] is distinct from v_expected then
      refusal := 'entity_type';
    end if;
    if refusal is null and (p_entity_ids[i] is null or p_entity_ids[i] !~ '^[1-9][0-9]{0,17}$') then
      refusal := 'entity_id';
    end if;
    if refusal is null then
      insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, trace_context)
      values (p_receivers[i], p_entity_type_ids[i], p_entity_ids[i], p_source_ips[i],
              bitrix_sync._trace_context(p_trace_contexts[i]))
      returning id into inbox_id;
      if p_receivers[i] = 'contact' then
        v_contact := true;
      else
        v_alert := true;
      end if;
    end if;
    return next;
  end loop;
  -- One wake-up per call and receiver (not per row, see above) for the sync loop's LISTEN.
  if v_contact then
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
  if v_alert then
    perform pg_notify('bitrix_sync_webhooks', 'alert');
  end if;
end $$;
comment on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) is
  'Receiver entry point (§10.1): for each event (parallel arrays), checks the receiver, the entity type (3 for contact, alerts.entity_type_id for alert) and the entity ID and inserts an inbox row with the request''s trace context (W3C traceparent, malformed ones ignored); returns per event its 1-based ord and the inbox id, or a refusal (entity_type, entity_id, alert_entity_type_unset, alert_config_invalid, unknown_receiver) and no row. One event''s refusal never fails another''s.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement (and the readiness probe of that path).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.accept_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null
) returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row record;
begin
  select * into v_row
    from bitrix_sync.accept_webhooks(array[p_receiver], array[p_entity_type_id], array[p_entity_id], array[p_source_ip]);
  case v_row.refusal
    when 'alert_entity_type_unset' then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not set'
        using errcode = 'BS021',
              hint = 'Set the smart process entityTypeId with propose_settings(''{"alerts.entity_type_id": <id>}'', ...) and activate it.';
    when 'alert_config_invalid' then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not usable'
        using errcode = 'BS023',
              hint = 'Propose the entityTypeId as a whole number with propose_settings(), then validate and activate it.';
    when 'unknown_receiver' then
      raise exception 'unknown webhook receiver %', p_receiver
        using errcode = 'BS022', hint = 'Receivers are contact and alert.';
    when 'entity_id' then
      raise exception 'the entity ID must be a numeric Bitrix24 ID'
        using errcode = 'BS004', hint = 'Pass the ID from document_id[2], e.g. ''4711''.';
    when 'entity_type' then
      raise exception 'the % receiver does not accept entity type %', p_receiver, p_entity_type_id
        using errcode = 'BS020',
              hint = 'The robot belongs to another document type or smart process; check the robot and alerts.entity_type_id.';
    else
      return v_row.inbox_id;
  end case;
end $$;
comment on function bitrix_sync.accept_webhook(text, integer, text, inet) is
  'One event through accept_webhooks(), for an operator with psql re-recording a robot call that was lost (the robot does not retry): returns the inbox id; BS020 wrong entity type, BS004 malformed ID, BS021/BS023 alert receiver not configured or unusable, BS022 unknown receiver; nothing is written then. Security definer: the admin role has no table rights.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.accept_webhook(text,integer,text,inet)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Re-records one robot call by hand (the robot does not retry).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
