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
-- entity type is not the receiver's (the HTTP layer answers 400), alert_entity_type_unset / BS021
-- alerts.entity_type_id is not set (503); BS022 unknown receiver and BS004 bad arrays are bugs in
-- the caller and fail the whole call.

-- Issue 12 added each request's trace context (an array with a default): the four-array form is
-- replaced.
drop function if exists bitrix_sync.accept_webhooks(text[], integer[], text[], inet[]);

create or replace function bitrix_sync.accept_webhooks(
  p_receivers text[], p_entity_type_ids integer[], p_entity_ids text[], p_source_ips inet[],
  p_trace_contexts text[] default null
) returns table (ord integer, inbox_id bigint, refusal text)
language plpgsql as $$
declare
  v_n integer := coalesce(cardinality(p_receivers), 0);
  v_alert_type integer;
  v_expected integer;
begin
  if coalesce(cardinality(p_entity_type_ids), 0) <> v_n or coalesce(cardinality(p_entity_ids), 0) <> v_n
     or coalesce(cardinality(p_source_ips), 0) <> v_n or v_n > 1000
     or (p_trace_contexts is not null and cardinality(p_trace_contexts) <> v_n) then
    raise exception 'accept_webhooks needs four (or five) arrays of one length, at most 1000'
      using errcode = 'BS004', hint = 'Pass receiver, entity type, entity ID, source IP and optionally trace context per event, in that order.';
  end if;
  if 'alert' = any(p_receivers) then
    v_alert_type := (bitrix_sync.active_settings() ->> 'alerts.entity_type_id')::integer;
  end if;
  for i in 1 .. v_n loop
    ord := i;
    inbox_id := null;
    refusal := null;
    if p_receivers[i] = 'contact' then
      v_expected := 3;
    elsif p_receivers[i] = 'alert' then
      v_expected := v_alert_type;
    else
      raise exception 'unknown webhook receiver %', p_receivers[i]
        using errcode = 'BS022', hint = 'Receivers are contact and alert.';
    end if;
    if v_expected is null then
      refusal := 'alert_entity_type_unset';
    elsif p_entity_type_ids[i] is distinct from v_expected then
      refusal := 'entity_type';
    else
      insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, trace_context)
      values (p_receivers[i], p_entity_type_ids[i], p_entity_ids[i], p_source_ips[i],
              bitrix_sync._trace_context(p_trace_contexts[i]))
      returning id into inbox_id;
    end if;
    return next;
  end loop;
  -- One wake-up per call and receiver (not per row, see above) for the sync loop's LISTEN.
  if exists (select 1 from unnest(p_receivers) r where r = 'contact') then
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
  if exists (select 1 from unnest(p_receivers) r where r = 'alert') then
    perform pg_notify('bitrix_sync_webhooks', 'alert');
  end if;
end $$;
comment on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) is
  'Receiver entry point (§10.1): for each event (parallel arrays), checks the entity type against the receiver (3 for contact, alerts.entity_type_id for alert) and inserts an inbox row with the request''s trace context (W3C traceparent, malformed ones ignored); returns per event its 1-based ord and the inbox id, or a refusal (entity_type, alert_entity_type_unset) and no row.';

create or replace function bitrix_sync.accept_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null
) returns bigint
language plpgsql as $$
declare
  v_row record;
begin
  select * into v_row
    from bitrix_sync.accept_webhooks(array[p_receiver], array[p_entity_type_id], array[p_entity_id], array[p_source_ip]);
  if v_row.refusal = 'alert_entity_type_unset' then
    raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not set'
      using errcode = 'BS021',
            hint = 'Set the smart process entityTypeId with propose_settings(''{"alerts.entity_type_id": <id>}'', ...) and activate it.';
  elsif v_row.refusal is not null then
    raise exception 'the % receiver does not accept entity type %', p_receiver, p_entity_type_id
      using errcode = 'BS020',
            hint = 'The robot belongs to another document type or smart process; check the robot and alerts.entity_type_id.';
  end if;
  return v_row.inbox_id;
end $$;
comment on function bitrix_sync.accept_webhook(text, integer, text, inet) is
  'One event through accept_webhooks(), for psql and scripts: returns the inbox id; BS020 wrong entity type, BS021 alert receiver not configured; nothing is written then.';

revoke all on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) from public;
revoke all on function bitrix_sync.accept_webhook(text, integer, text, inet) from public;
grant execute on function bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]) to bitrix_sync_user;
grant execute on function bitrix_sync.accept_webhook(text, integer, text, inet) to bitrix_sync_user;
