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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
