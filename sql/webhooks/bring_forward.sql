-- Inbox events (§8) brought forward when the portal answers again: an event whose read of the portal
-- failed because the portal as a whole failed waits only for the portal, not for its backoff.

create or replace function bitrix_sync.bring_forward_webhooks(p_codes text[])
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer;
  v_receivers text[];
  v_receiver text;
begin
  if p_codes is null then
    raise exception 'bring_forward_webhooks needs the failure codes to bring forward'
      using errcode = 'BS004', hint = 'Pass the portal-wide failure codes (src/crm/classify.ts, PORTAL_WIDE_CODES).';
  end if;
  -- Retries that wait only because the portal as a whole failed (the caller's codes): due now. The
  -- receivers' loops take them in their usual rounds, one read per Contact or item, through the
  -- limiter, so this is no stampede.
  with picked as (
    select w.id from bitrix_sync.webhook_inbox w
     where w.status = 'retry_wait' and w.next_attempt_at > now() and w.last_error_code = any(p_codes)
     for update skip locked
  ), moved as (
    update bitrix_sync.webhook_inbox w set next_attempt_at = now()
      from picked where w.id = picked.id
    returning w.receiver
  )
  select count(*)::integer, coalesce(array_agg(distinct m.receiver::text), '{}')
    into v_n, v_receivers from moved m;
  foreach v_receiver in array v_receivers loop
    perform pg_notify('bitrix_sync_webhooks', v_receiver);
  end loop;
  return v_n;
end $$;
comment on function bitrix_sync.bring_forward_webhooks(text[]) is
  'Inbox events waiting in retry_wait after a failure with one of p_codes (the portal-wide codes) become due now, and their receivers are notified; returns how many were brought forward. Called by the pump when the portal answers again, beside bring_forward_commands().';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.bring_forward_webhooks(text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (the pump after a portal-wide failure).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
