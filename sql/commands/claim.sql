-- CRM commands (§7.2, §8): claimed by the pump under a lease and marked in_flight (the durable
-- "send started" marker) before the HTTP batch leaves.
-- Fenced single-row statements test the state with IS NOT DISTINCT FROM (or wrap an IN list in
-- IS TRUE), never with a bare = or IN (issue 14). Same result for these NOT NULL columns, but the
-- planner cannot prove a partial index's predicate from it, so the row is found by its primary key.
-- With a bare comparison, statistics taken while few rows were live (an installation whose history
-- is finished work) made the planner prefer a live-state partial index that looked empty, and every
-- transition then scanned the whole backlog: quadratic in the backlog, until the next ANALYZE, which
-- on a table with a long history can be far off.

create or replace function bitrix_sync.claim_commands(
  p_worker text, p_limit integer, p_lease interval
) returns setof bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row record;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the batch.size and lease.ttl_sec settings.';
  end if;
  -- The processing gate (§17, sql/cutover.sql): nothing is claimed before the cutover, nor while
  -- processing is paused (sql/pause.sql).
  if not bitrix_sync.cutover_performed() or bitrix_sync.sync_paused() then
    return;
  end if;

  -- A holder that died with a request out: a write may have landed (uncertain), a read is retried.
  for v_row in
    select c.id, c.command_type, c.workflow_id from bitrix_sync.crm_commands c
     where c.status = 'in_flight' and c.locked_until < now()
     for update skip locked
  loop
    if bitrix_sync._is_write_command(v_row.command_type) then
      update bitrix_sync.crm_commands
         set status = 'uncertain', lease_token = null, locked_by = null, locked_until = null,
             last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
      if v_row.workflow_id is not null then
        perform bitrix_sync._wake_workflow(v_row.workflow_id);
      end if;
    else
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(), lease_token = null, locked_by = null,
             locked_until = null, last_error_code = 'lease_expired_in_flight'
       where id = v_row.id;
    end if;
  end loop;

  -- retry_wait -> pending (due), then claim pending and expired leased rows.
  update bitrix_sync.crm_commands c set status = 'pending'
   where c.id in (select d.id from bitrix_sync.crm_commands d
                   where d.status = 'retry_wait' and d.next_attempt_at <= now()
                   for update skip locked);

  return query
  with due as (
    select c.id, c.next_attempt_at as sort_at from bitrix_sync.crm_commands c
     where c.status = 'pending' and c.next_attempt_at <= now()
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  ), expired as (
    select c.id, c.locked_until as sort_at from bitrix_sync.crm_commands c
     where c.status = 'leased' and c.locked_until < now()
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) x order by sort_at limit p_limit
  )
  update bitrix_sync.crm_commands c
     set status = 'leased', lease_token = gen_random_uuid(), locked_by = left(p_worker, 128),
         locked_until = now() + p_lease, updated_at = now()
    from picked
   where c.id = picked.id
  returning c.*;
end $$;
comment on function bitrix_sync.claim_commands(text, integer, interval) is
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait. Returns nothing before perform_cutover() and while paused (pause_sync()).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.due_commands()
returns table (due integer, adds integer, oldest_ms double precision)
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- What claim_commands() would take now: due pending and retry_wait rows, and the leases of holders
  -- that died (it recovers those: uncertain writes, retried reads). Nothing before the cutover, as
  -- claim_commands(): the pump takes no limiter permit for a claim of nothing.
  select count(*)::integer,
         (count(*) filter (where c.command_type = 'contact.add'))::integer,
         (extract(epoch from now() - min(greatest(c.created_at, c.next_attempt_at))) * 1000)::double precision
    from bitrix_sync.crm_commands c
   where ((c.status in ('pending', 'retry_wait') and c.next_attempt_at <= now())
          or (c.status in ('leased', 'in_flight') and c.locked_until < now()))
     and bitrix_sync.cutover_performed() and not bitrix_sync.sync_paused()
$$;
comment on function bitrix_sync.due_commands() is
  'The pump''s backlog: commands claim_commands() would take now (due, and expired leases it recovers), how many of them are creates, and how long the oldest has waited (ms; null when none). Nothing before perform_cutover() and while paused.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.due_commands()', array['EXECUTE'], array[]::text[], array[]::text[], 'The pump''s backlog before it takes a limiter permit (gated by the cutover).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.send_commands(
  p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid, p_reply_within interval default null
) returns setof bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  -- A first send's retry horizon starts now: one reading of the setting for the whole batch, where
  -- the column's formula read it once per row. A resend keeps the horizon of its first send.
  v_first_deadline timestamptz := bitrix_sync._retry_deadline(now());
begin
  if coalesce(array_length(p_ids, 1), 0) <> coalesce(array_length(p_lease_tokens, 1), 0) then
    raise exception 'send_commands needs one lease token per command id'
      using errcode = 'BS004', hint = 'Pass the ids and tokens returned by claim_commands(), in the same order.';
  end if;
  if p_reply_within is not null and p_reply_within <= interval '0' then
    raise exception 'send_commands needs a positive reply deadline or none'
      using errcode = 'BS004', hint = 'Pass the send window plus the HTTP timeout (BITRIX_SYNC_HTTP_TIMEOUT_SEC), or null.';
  end if;
  return query
  update bitrix_sync.crm_commands c
     set status = 'in_flight', sent_at = now(), batch_id = p_batch_id, attempt_count = c.attempt_count + 1,
         first_sent_at = coalesce(c.first_sent_at, now()),
         deadline_at = case when c.first_sent_at is null then v_first_deadline
                            else bitrix_sync._retry_deadline(c.first_sent_at) end,
         reply_deadline_at = now() + p_reply_within, updated_at = now()
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where c.id = t.id and c.status is not distinct from 'leased' and c.lease_token = t.token
  returning c.id;
end $$;
comment on function bitrix_sync.send_commands(bigint[], uuid[], uuid, interval) is
  'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The first send stamps first_sent_at, where the retry horizon starts. p_reply_within (the sender''s send window plus its HTTP timeout) stamps reply_deadline_at, the moment by which the request is out and given up at the latest (null: unknown).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.send_commands(bigint[],uuid[],uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
