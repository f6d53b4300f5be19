--! Previous: sha1:7bc7412a4d0bbb26699b83c72b20518f8a009723
--! Hash: sha1:2c89b6b815861ea0e18a4aa9151c945b215983c8
--! Message: receivers

-- Receivers (§10.1, docs/receivers.md): accept_webhook(), the single statement a robot webhook
-- request runs (entity type check + durable inbox insert), with its grant to bitrix_sync_user.
set local lock_timeout = '10s';

-- >>> sql/receiver.sql (included)
-- Robot webhook receivers (§10.1, docs/receivers.md): the one statement a receiver request runs.
-- The HTTP layer has already checked the token, the form and the portal identity; this function
-- checks what only the database knows (the alert smart process's entityTypeId, a hot setting) and
-- writes the inbox row through record_webhook(), all in the statement's own transaction, so a
-- request costs one round trip. Refusals raise before any write: a refused request leaves no row.
--
-- Errors: BS020 entity type not accepted by this receiver (the HTTP layer answers 400),
-- BS021 alert receiver not configured (503), BS022 unknown receiver (a programming error).

create or replace function bitrix_sync.accept_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null
) returns bigint
language plpgsql as $$
declare
  v_expected integer;
begin
  if p_receiver = 'contact' then
    v_expected := 3;
  elsif p_receiver = 'alert' then
    v_expected := (bitrix_sync.active_settings() ->> 'alerts.entity_type_id')::integer;
    if v_expected is null then
      raise exception 'the alert receiver cannot accept events: alerts.entity_type_id is not set'
        using errcode = 'BS021',
              hint = 'Set the smart process entityTypeId with propose_settings(''{"alerts.entity_type_id": <id>}'', ...) and activate it.';
    end if;
  else
    raise exception 'unknown webhook receiver %', p_receiver
      using errcode = 'BS022', hint = 'Receivers are contact and alert.';
  end if;
  if p_entity_type_id is distinct from v_expected then
    raise exception 'the % receiver accepts entity type %, not %', p_receiver, v_expected, p_entity_type_id
      using errcode = 'BS020',
            hint = 'The robot belongs to another document type or smart process; check the robot and alerts.entity_type_id.';
  end if;
  return bitrix_sync.record_webhook(p_receiver, p_entity_type_id, p_entity_id, p_source_ip);
end $$;
comment on function bitrix_sync.accept_webhook(text, integer, text, inet) is
  'Receiver entry point (§10.1): checks the entity type against the receiver (3 for contact, alerts.entity_type_id for alert) and records the event durably; returns the inbox id. BS020 wrong type, BS021 alert receiver not configured, BS022 unknown receiver; nothing is written then.';

revoke all on function bitrix_sync.accept_webhook(text, integer, text, inet) from public;
grant execute on function bitrix_sync.accept_webhook(text, integer, text, inet) to bitrix_sync_user;
-- <<< sql/receiver.sql
