-- CRM commands (§7.2, §8, §9): issued by a workflow step, claimed by the pump under a lease,
-- marked in_flight (the durable "send started" marker) before the HTTP batch leaves, and completed
-- per sub-result. A write with no reply becomes uncertain and is never resent blindly: its workflow
-- decides (src/workflows/decide/unanswered-write.ts) to search for a create, read again before a
-- non-idempotent write, or resend an idempotent one, each after the late execution could have landed
-- and after the command's backoff.
-- Fenced single-row statements test the state with IS NOT DISTINCT FROM (or wrap an IN list in
-- IS TRUE), never with a bare = or IN (issue 14). Same result for these NOT NULL columns, but the
-- planner cannot prove a partial index's predicate from it, so the row is found by its primary key.
-- With a bare comparison, statistics taken while few rows were live (an installation whose history
-- is finished work) made the planner prefer a live-state partial index that looked empty, and every
-- transition then scanned the whole backlog: quadratic in the backlog, until the next ANALYZE, which
-- on a table with a long history can be far off.

create or replace function bitrix_sync._is_write_command(p_command_type text) returns boolean
language sql immutable parallel safe set search_path = pg_catalog, pg_temp as $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;
comment on function bitrix_sync._is_write_command(text) is
  'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';

create or replace function bitrix_sync._wake_workflow(p_workflow_id uuid) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now()
   where id = p_workflow_id and state is not distinct from 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync._wake_workflow(uuid) is
  'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text,
  p_trace_context text default null, p_step_data jsonb default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  if p_step_data is not null and jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  -- running -> waiting_crm (event await_crm; the guard trigger checks the edge) under the caller's
  -- lease, with the step and its state in the same row version: one write of the workflow per step.
  update bitrix_sync.workflow_instances w
     set state = 'waiting_crm', current_step = coalesce(p_step, w.current_step),
         step_data = coalesce(p_step_data, w.step_data), next_attempt_at = now(),
         lease_token = null, locked_by = null, locked_until = null
   where w.id = p_workflow_id and w.state is not distinct from 'running' and w.lease_token = p_lease_token
  returning * into v_wf;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id, trace_context)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id,
          bitrix_sync._trace_context(p_trace_context))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text, jsonb) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm (await_crm) at step p_step, storing p_step_data (the step state, a JSON object) in the same write when given. The unique index allows one active command per workflow. p_trace_context is the issuing step''s W3C traceparent (malformed ones are ignored): every send of the command is traced under it. Refuses a stale lease or a workflow not running (BS001).';

create or replace function bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_cmd bitrix_sync.crm_commands;
begin
  if p_command_type not like 'alert.%' then
    raise exception 'alert commands must be alert.* types, got %', p_command_type
      using errcode = 'BS004', hint = 'Contact commands belong to a workflow: use issue_command().';
  end if;
  insert into bitrix_sync.crm_commands (alert_id, command_type, params)
  values (p_alert_id, p_command_type, coalesce(p_params, '{}'::jsonb))
  returning * into v_cmd;
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_alert_command(bigint, text, jsonb) is
  'Queues a smart-process command for a business alert; independent of workflow steps (§7.1).';

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
         locked_until = now() + p_lease
    from picked
   where c.id = picked.id
  returning c.*;
end $$;
comment on function bitrix_sync.claim_commands(text, integer, interval) is
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait. Returns nothing before perform_cutover() and while paused (pause_sync()).';

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

create or replace function bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid)
returns setof bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  if coalesce(array_length(p_ids, 1), 0) <> coalesce(array_length(p_lease_tokens, 1), 0) then
    raise exception 'send_commands needs one lease token per command id'
      using errcode = 'BS004', hint = 'Pass the ids and tokens returned by claim_commands(), in the same order.';
  end if;
  return query
  update bitrix_sync.crm_commands c
     set status = 'in_flight', sent_at = now(), batch_id = p_batch_id, attempt_count = c.attempt_count + 1,
         first_sent_at = coalesce(c.first_sent_at, now()),
         deadline_at = bitrix_sync._retry_deadline(coalesce(c.first_sent_at, now()))
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where c.id = t.id and c.status is not distinct from 'leased' and c.lease_token = t.token
  returning c.id;
end $$;
comment on function bitrix_sync.send_commands(bigint[], uuid[], uuid) is
  'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The first send stamps first_sent_at, where the retry horizon starts.';

create or replace function bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status is not distinct from 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_command(bigint, uuid, jsonb) is
  'in_flight -> succeeded with a safe response projection, and wakes the workflow. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.complete_commands(p_ids bigint[], p_lease_tokens uuid[], p_responses jsonb[])
returns setof bigint
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  if coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_lease_tokens), 0)
     or coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_responses), 0) then
    raise exception 'complete_commands needs one lease token and one response per command id'
      using errcode = 'BS004', hint = 'Pass three arrays of the same length, in the same order.';
  end if;
  -- One statement for the whole batch: the commands still held under their tokens succeed, and the
  -- workflows waiting for them wake (waiting_crm -> running, crm_replied) as complete_command does.
  return query
  with done as (
    update bitrix_sync.crm_commands c
       set status = 'succeeded', response = t.response, completed_at = now(), last_error_code = null,
           lease_token = null, locked_by = null, locked_until = null
      from unnest(p_ids, p_lease_tokens, p_responses) as t(id, token, response)
     where c.id = t.id and c.status is not distinct from 'in_flight' and c.lease_token = t.token
    returning c.id, c.workflow_id
  ), woken as (
    update bitrix_sync.workflow_instances w
       set state = 'running', next_attempt_at = now()
     where w.id in (select d.workflow_id from done d where d.workflow_id is not null)
       and w.state is not distinct from 'waiting_crm'
    returning w.id
  )
  select d.id from done d;
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync.complete_commands(bigint[], uuid[], jsonb[]) is
  'in_flight -> succeeded for many commands in one call, each with its safe response projection, waking their workflows (waiting_crm -> running). Returns the ids completed; a command whose token is stale is left alone (its new holder settles it), where complete_command would refuse it with BS001.';

create or replace function bitrix_sync.bring_forward_commands(p_codes text[], p_limit integer default null)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer;
  v_w integer := 0;
begin
  if p_limit is not null and p_limit < 1 then
    raise exception 'bring_forward_commands needs a positive limit or none'
      using errcode = 'BS004', hint = 'Pass 1 for a probe, null for every waiting retry.';
  end if;
  -- Retries that wait only because the portal as a whole failed (the caller's codes): due now. They
  -- are claimed batch by batch through the limiter like any due command, so this is no stampede.
  with picked as (
    select c.id from bitrix_sync.crm_commands c
     where c.status = 'retry_wait' and c.next_attempt_at > now() and c.last_error_code = any(p_codes)
     order by c.next_attempt_at, c.id
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.crm_commands c set next_attempt_at = now()
    from picked where c.id = picked.id;
  get diagnostics v_n = row_count;
  if v_n > 0 then
    perform pg_notify('bitrix_sync_commands', '');
  end if;
  -- When the portal answers again (no limit; a probe is one command): workflows that wait in
  -- waiting_retry for the same reason (a command past its own retries handed back to its workflow
  -- with a portal-wide code) are due now too. Their step reads before it writes, and what it issues
  -- goes through the limiter. Waits for other reasons (a late write that may still land) keep theirs.
  if p_limit is null then
    with picked as (
      select w.id from bitrix_sync.workflow_instances w
       where w.state = 'waiting_retry' and w.next_attempt_at > now() and w.last_error_code = any(p_codes)
       for update skip locked
    )
    update bitrix_sync.workflow_instances w set next_attempt_at = now()
      from picked where w.id = picked.id;
    get diagnostics v_w = row_count;
    if v_w > 0 then
      perform pg_notify('bitrix_sync_workflows', '');
    end if;
  end if;
  return v_n + v_w;
end $$;
comment on function bitrix_sync.bring_forward_commands(text[], integer) is
  'Makes retry_wait commands whose last error is one of p_codes (failures of the whole portal: server errors, lost connections, limit refusals) due now, the earliest first, at most p_limit (null: all). With no limit, also makes waiting_retry workflows whose last error is one of p_codes due now (a command handed back to its workflow). The pump calls it with one command as a probe while the portal fails, and with no limit when the portal answers again. Returns how many commands and workflows.';

create or replace function bitrix_sync.release_command(p_id bigint, p_lease_token uuid)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'pending', lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status is not distinct from 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_command(bigint, uuid) is
  'leased -> pending without sending (no limiter token, method blocked, shutdown). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._check_bitrix_error(p_error text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  -- Bitrix24 error codes are identifiers (QUERY_LIMIT_EXCEEDED, ERROR_CORE, expired_token); the
  -- error_description next to them may quote field values, so only the identifier is kept (§9).
  if p_error is not null and p_error !~ '^[A-Za-z][A-Za-z0-9_]{0,63}$' then
    raise exception 'bitrix error must be the Bitrix24 error code (an identifier of at most 64 characters)'
      using errcode = 'BS004',
            hint = 'Pass the reply''s "error" field, e.g. QUERY_LIMIT_EXCEEDED, never error_description or raw text.';
  end if;
end $$;
comment on function bitrix_sync._check_bitrix_error(text) is
  'Refuses anything but a Bitrix24 error code identifier (null allowed), so raw reply text never reaches crm_commands or technical_dead_letters. SQLSTATE BS004.';

create or replace function bitrix_sync._command_first_attempt(p_row bitrix_sync.crm_commands)
returns timestamptz
language sql stable set search_path = pg_catalog, pg_temp as $$
  -- A command refused before it was ever sent has only its creation to count from.
  select coalesce(p_row.first_sent_at, p_row.created_at)
$$;
comment on function bitrix_sync._command_first_attempt(bitrix_sync.crm_commands) is
  'Internal: where a command''s retry horizon starts: its first send, or its creation if it was never sent.';

create or replace function bitrix_sync._dead_letter_command_row(
  p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
  v_first timestamptz := bitrix_sync._command_first_attempt(p_row);
begin
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
         deadline_at = bitrix_sync._retry_deadline(v_first),
         lease_token = null, locked_by = null, locked_until = null
   where id = p_row.id
  returning * into v_row;
  perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type, p_error_code,
    v_row.attempt_count - v_row.limit_hits, v_first, v_row.workflow_id, v_row.id, v_row.correlation_id,
    p_http_status, p_bitrix_error);
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands, text, integer, text) is
  'Internal: moves a held command to dead_letter, writes the technical DLQ row (first attempt and horizon) and wakes its workflow.';

create or replace function bitrix_sync.retry_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval, p_spends_attempt boolean default true,
  p_http_status integer default null, p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- The horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
  end if;
  -- A command whose target may have changed meanwhile (the clear of a rebind's previous Contact,
  -- §5.4 step 4) is never resent as it is: it ends here, without a DLQ row, and its workflow waits
  -- (schedule_workflow_retry, the workflow's horizon) and reads the Contact again before a new one.
  if v_row.workflow_id is not null and (v_row.params ->> 'reread_before_retry') = 'true' then
    update bitrix_sync.crm_commands c
       set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
           last_http_status = p_http_status, last_bitrix_error = left(p_bitrix_error, 64),
           deadline_at = v_deadline,
           response = jsonb_build_object('retry_by_workflow', true,
                                         'retry_at', now() + greatest(p_delay, interval '0')),
           limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
           lease_token = null, locked_by = null, locked_until = null
     where c.id = p_id
    returning * into v_row;
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
    return v_row;
  end if;
  update bitrix_sync.crm_commands c
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_http_status = p_http_status,
         last_bitrix_error = left(p_bitrix_error, 64), deadline_at = v_deadline,
         -- QUERY_LIMIT_EXCEEDED is refused before execution: it is not an attempt (§9).
         limit_hits = c.limit_hits + case when p_spends_attempt then 0 else 1 end,
         lease_token = null, locked_by = null, locked_until = null
   where c.id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_command(bigint, uuid, text, interval, boolean, integer, text) is
  'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). When the retry would fall past the horizon (first send + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. A workflow command with params.reread_before_retry is handed back instead: dead_letter with the error code, no DLQ row, response {retry_by_workflow, retry_at}, and its workflow wakes. The returned row says which. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status is not distinct from 'in_flight' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.mark_command_uncertain(bigint, uuid, text) is
  'in_flight -> uncertain: the request left and no reply came. The workflow decides (decide/unanswered-write.ts): a create is searched for, a non-idempotent write read again, an idempotent one resent, never before a late execution could have landed and the backoff passed. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer default null,
  p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return bitrix_sync._dead_letter_command_row(v_row, p_error_code, p_http_status, p_bitrix_error);
end $$;
comment on function bitrix_sync.dead_letter_command(bigint, uuid, text, integer, text) is
  'leased|in_flight -> dead_letter with a technical DLQ row (permanent failure). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._workflow_holder(p_command_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state is not distinct from 'running' and w.lease_token = p_workflow_token
   for update of c;
  if not found then
    perform bitrix_sync._refuse_stale('workflow of command', p_command_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._workflow_holder(bigint, uuid) is
  'Internal: the command, locked, when the caller holds its workflow''s lease; otherwise BS001.';

create or replace function bitrix_sync.begin_command_reconcile(p_id bigint, p_workflow_token uuid)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  update bitrix_sync.crm_commands set status = 'reconcile' where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.begin_command_reconcile(bigint, uuid) is
  'uncertain -> reconcile: the workflow (holding its lease) starts the recovery search for an unanswered write.';

create or replace function bitrix_sync.resolve_command_reconcile(
  p_id bigint, p_workflow_token uuid, p_outcome text, p_response jsonb default null,
  p_error_code text default null
) returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  v_row := bitrix_sync._workflow_holder(p_id, p_workflow_token);
  if v_row.status <> 'reconcile' then
    raise exception 'command % is %, not reconcile', p_id, v_row.status
      using errcode = 'BS002', hint = 'Call begin_command_reconcile() first.';
  end if;
  case p_outcome
    when 'succeeded' then
      update bitrix_sync.crm_commands
         set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null
       where id = p_id returning * into v_row;
    when 'retry' then
      -- The search proved the write did not land: sending it again cannot duplicate anything.
      perform bitrix_sync._check_code(coalesce(p_error_code, 'reconciled_not_applied'));
      if now() > bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)) then
        -- Past the horizon (§9) a write that keeps getting no reply is not sent again: without
        -- this, a portal that never answers would keep the workflow waiting for ever.
        update bitrix_sync.crm_commands
           set status = 'dead_letter', completed_at = now(), last_error_code = 'retry_horizon_exceeded'
         where id = p_id returning * into v_row;
        perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type,
          'retry_horizon_exceeded', v_row.attempt_count - v_row.limit_hits,
          bitrix_sync._command_first_attempt(v_row), v_row.workflow_id, v_row.id, v_row.correlation_id,
          null, null);
        return v_row;
      end if;
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'superseded' then
      -- The workflow decides from a fresh read instead (a rebind's clear of the previous Contact):
      -- not a technical failure, so no DLQ row.
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      perform bitrix_sync._dead_letter('crm_command', v_row.id::text, v_row.command_type, p_error_code,
        v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
        v_row.workflow_id, v_row.id, v_row.correlation_id, null, null);
    else
      raise exception 'reconcile outcome must be succeeded, retry, superseded or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied; dead_letter with retry_horizon_exceeded and a DLQ row instead once the command is past its horizon, so the caller must look at the returned status) or dead_letter (superseded: dead_letter without a DLQ row, the workflow reads again and decides). Fenced by the workflow lease.';

create or replace function bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and (status in ('leased', 'in_flight')) is true and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  if v_row.workflow_id is not null then
    perform bitrix_sync._wake_workflow(v_row.workflow_id);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.reject_command(bigint, uuid, text) is
  'leased|in_flight -> dead_letter for a business failure (invalid phone, unknown citizenship): no technical DLQ row; the workflow wakes, parks in waiting_manual and raises a business alert (§9). Refuses stale tokens (BS001).';
