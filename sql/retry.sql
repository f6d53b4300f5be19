-- Retry horizon (§9): the one place that decides when retrying stops. TypeScript computes only the
-- jittered delay; each retry function (retry_sync_task, schedule_workflow_retry, retry_command,
-- retry_webhook) compares now() + delay with this deadline and dead-letters the row itself.

create or replace function bitrix_sync._retry_deadline(p_first_attempt_at timestamptz) returns timestamptz
language sql stable as $$
  select p_first_attempt_at
         + make_interval(secs => (bitrix_sync._active_setting('retry.horizon_sec') #>> '{}')::double precision)
$$;
comment on function bitrix_sync._retry_deadline(timestamptz) is
  'The retry horizon of a row whose first attempt was p_first_attempt_at: that instant plus the active retry.horizon_sec. A retry due after it dead-letters with retry_horizon_exceeded.';
