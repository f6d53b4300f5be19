-- Retry horizon (§9): the one place that decides when retrying stops. TypeScript computes only the
-- jittered delay; each retry function (retry_sync_task, schedule_workflow_retry, retry_command,
-- retry_webhook) compares now() + delay with this deadline and dead-letters the row itself.
--
-- No pinned search_path, on purpose: a SQL function with a SET clause is never inlined, and this one
-- is the default of deadline_at on workflow_instances and crm_commands, so it runs in every insert of
-- a workflow or a command (measured: 70 -> 90 µs per workflow insert pinned, bench:search-path;
-- migration 000028). So every operator and function is written schema-qualified: whatever the
-- caller's search_path holds, nothing else can be picked up
-- (test/integration/function-search-path.test.ts checks the body).
--
-- _dead_letter() is the one writer of technical_dead_letters rows: every function that gives a row
-- up (a permanent failure, a retry past the horizon) calls it, with the row's first attempt; the
-- deadline it records is _retry_deadline() of that first attempt.

-- Time spent paused (sql/pause.sql) does not count: the deadline moves on by the paused time since
-- the first attempt, so a pause of any length resumes without dead letters. A first attempt that is
-- now (the deadline_at defaults, every insert) has no paused time behind it: the CASE skips the
-- look at the pauses there, so an insert costs what it did. A retry's decision pays for the look:
-- about 10 µs more (backend CPU, 13 -> 23 µs per call), once per failure.
create or replace function bitrix_sync._retry_deadline(p_first_attempt_at timestamptz) returns timestamptz
language sql stable as $$
  select p_first_attempt_at
         operator(pg_catalog.+) pg_catalog.make_interval(
           secs => (bitrix_sync._active_setting('retry.horizon_sec') operator(pg_catalog.#>>) '{}')::pg_catalog.float8)
         operator(pg_catalog.+) case when p_first_attempt_at operator(pg_catalog.>=) pg_catalog.now()
                                     then '0'::pg_catalog.interval
                                     else bitrix_sync._paused_since(p_first_attempt_at) end
$$;
comment on function bitrix_sync._retry_deadline(timestamptz) is
  'The retry horizon of a row whose first attempt was p_first_attempt_at: that instant plus the active retry.horizon_sec plus the time processing was paused since (_paused_since). A retry due after it dead-letters with retry_horizon_exceeded. Inlined into its callers and the deadline_at defaults: no pinned search_path, every operator and name schema-qualified.';

create or replace function bitrix_sync._dead_letter(
  p_source text, p_source_id text, p_operation text, p_error_code text, p_attempt_count integer,
  p_first_attempt_at timestamptz, p_workflow_id uuid, p_command_id bigint, p_correlation_id uuid,
  p_http_status integer, p_bitrix_error text
) returns void
language sql set search_path = pg_catalog, pg_temp as $$
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values (p_source, p_source_id, p_workflow_id, p_command_id, p_operation, p_error_code, p_http_status,
          left(p_bitrix_error, 64), p_attempt_count, p_first_attempt_at,
          bitrix_sync._retry_deadline(p_first_attempt_at), p_correlation_id)
$$;
comment on function bitrix_sync._dead_letter(text, text, text, text, integer, timestamptz, uuid, bigint, uuid, integer, text) is
  'Internal: writes the technical DLQ row of a row given up (source and its id, operation, safe error code, attempts spent, first attempt; deadline = _retry_deadline(first attempt)). The one writer of technical_dead_letters rows.';
