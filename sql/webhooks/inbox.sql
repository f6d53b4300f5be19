-- Webhook inbox (§7.3, §10.1): the receiver records an event durably and answers; processing
-- claims one event per entity and coalesces the other pending events of that entity into it, so
-- one CRM read covers them. The partial unique index below is the guarantee that one entity is
-- never processed by two workers at once.

-- Built with the table in 000002; every later include finds it and skips it.
-- squawk-ignore require-concurrent-index-creation
create unique index if not exists webhook_inbox_one_processing_per_entity_uq
  on bitrix_sync.webhook_inbox (receiver, entity_id) where status = 'processing';
comment on index bitrix_sync.webhook_inbox_one_processing_per_entity_uq is
  'At most one event of an entity is being processed at any time, whichever worker holds it.';

create or replace function bitrix_sync.record_webhook(
  p_receiver text, p_entity_type_id integer, p_entity_id text, p_source_ip inet default null,
  p_event_id text default null, p_source_ts timestamptz default null
) returns bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_id bigint;
begin
  insert into bitrix_sync.webhook_inbox (receiver, entity_type_id, entity_id, source_ip, event_id, source_ts)
  values (p_receiver, p_entity_type_id, p_entity_id, p_source_ip, p_event_id, p_source_ts)
  on conflict (receiver, event_id) where event_id is not null do nothing
  returning id into v_id;
  perform pg_notify('bitrix_sync_webhooks', p_receiver);
  return v_id;
end $$;
comment on function bitrix_sync.record_webhook(text, integer, text, inet, text, timestamptz) is
  'Durable insert of an accepted webhook (status received). With a stable event_id a duplicate is dropped and null is returned.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.claim_webhooks(
  p_worker text, p_limit integer, p_lease interval,
  p_receiver text default null
) returns setof bitrix_sync.webhook_inbox
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_cand record;
  v_row bitrix_sync.webhook_inbox;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;
  -- The oldest due events, locked (SKIP LOCKED: another claimer's are left to it); of each entity
  -- among them the oldest event, the oldest p_limit entities first; taken in entity order. Two
  -- claimers can pick events of one entity; the second then waits at the unique index for the
  -- first to commit, and skips the entity. In entity order those waits never form a cycle (no
  -- deadlock), with no per-entity lock. (An advisory lock per entity did that before migration
  -- 000028; any role may take advisory locks, so one could hold back an entity's events for ever.)
  for v_cand in
    with window_ as (
      select w.id, w.receiver, w.entity_id, w.status from bitrix_sync.webhook_inbox w
       where (p_receiver is null or w.receiver = p_receiver)
         and ((w.status in ('received', 'retry_wait') and w.next_attempt_at <= now())
              or (w.status = 'processing' and w.locked_until < now()))
       order by w.id
       limit p_limit * 4
       for update skip locked
    ), firsts as (
      select distinct on (x.receiver, x.entity_id) x.id, x.receiver, x.entity_id, x.status
        from window_ x order by x.receiver, x.entity_id, x.id
    ), chosen as (
      select f.id, f.receiver, f.entity_id, f.status from firsts f order by f.id limit p_limit
    )
    select c.id, c.receiver, c.entity_id, c.status from chosen c order by c.receiver, c.entity_id
  loop
    begin
      update bitrix_sync.webhook_inbox
         set status = 'processing', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
             locked_until = now() + p_lease, attempt_count = attempt_count + 1, status_at = now()
       where id = v_cand.id and status = v_cand.status
      returning * into v_row;
    exception when unique_violation then
      -- Another event of this entity is being processed: leave this one for later.
      continue;
    end;
    continue when not found;
    -- The other pending events of the entity are covered by this one read.
    update bitrix_sync.webhook_inbox o
       set status = 'coalesced', coalesced_into = v_row.id, status_at = now()
     where o.receiver = v_row.receiver and o.entity_id = v_row.entity_id and o.status = 'received'
       and o.id <> v_row.id
       and o.id in (select x.id from bitrix_sync.webhook_inbox x
                     where x.receiver = v_row.receiver and x.entity_id = v_row.entity_id and x.status = 'received'
                     for update skip locked);
    return next v_row;
  end loop;
end $$;
comment on function bitrix_sync.claim_webhooks(text, integer, interval, text) is
  'Leases due inbox events, at most one per entity (enforced by a partial unique index; the entities whose oldest due event is oldest first, among the 4 x p_limit oldest due events not locked by another claimer), and coalesces the entity''s other received events into the claimed one. Takes entities in (receiver, entity_id) order, so two claimers that picked one entity never deadlock (the second waits for the first and skips it). Returns nothing before perform_cutover() and while paused (pause_sync()): the receivers keep recording, the events wait.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text)
returns bitrix_sync.webhook_inbox
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_outcome);
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = p_outcome, processed_at = now(), status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'processing' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced', processed_at = now(), status_at = now()
   where coalesced_into = p_id and status = 'coalesced';
  return v_row;
end $$;
comment on function bitrix_sync.complete_webhook(bigint, uuid, text) is
  'processing -> processed with a safe outcome code; the events coalesced into it are processed too. Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  update bitrix_sync.webhook_inbox
     set status = 'dead_letter', last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  update bitrix_sync.webhook_inbox
     set status = 'processed', outcome = 'coalesced_into_dead_letter', processed_at = now(), status_at = now()
   where coalesced_into = p_row.id and status = 'coalesced';
  -- An event is first attempted when it arrives: the receiver wakes the processor at once.
  perform bitrix_sync._dead_letter('webhook', v_row.id::text, 'webhook.' || v_row.receiver, p_error_code,
    v_row.attempt_count, v_row.received_at, null, null, null, null, null);
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox, text) is
  'Internal: moves a held event to dead_letter with its coalesced events and writes the technical DLQ row (first attempt = received_at).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the inbox functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval)
returns bitrix_sync.webhook_inbox
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from bitrix_sync.webhook_inbox
   where id = p_id and status = 'processing' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.received_at) then
    return bitrix_sync._dead_letter_webhook_row(v_row, 'retry_horizon_exceeded');
  end if;
  update bitrix_sync.webhook_inbox
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, status_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_webhook(bigint, uuid, text, interval) is
  'processing -> retry_wait; coalesced events stay attached and finish with it. When the retry would fall past the horizon (received_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead; the returned status says which. Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.webhook_inbox;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from bitrix_sync.webhook_inbox
   where id = p_id and status = 'processing' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('webhook', p_id::text);
  end if;
  return bitrix_sync._dead_letter_webhook_row(v_row, p_error_code);
end $$;
comment on function bitrix_sync.dead_letter_webhook(bigint, uuid, text) is
  'processing -> dead_letter with a technical DLQ row. Reconciliation still repairs the Contact later. Refuses stale tokens (BS001).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
