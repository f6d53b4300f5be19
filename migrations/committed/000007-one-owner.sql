--! Previous: sha1:480a6bfed6ed082694f4264893f298bcb6f53a8b
--! Hash: sha1:05eadac7253206f3b542aa19561462adc0370838
--! Message: one-owner

-- One owner for each decision (issue 9): SQL alone decides when retrying stops, from each row's
-- stored first attempt and the active retry.horizon_sec (sql/retry.sql); every state change the
-- service made with its own UPDATE or INSERT goes through a guarded function (workflow step data,
-- rebind requests, alert mirroring, snapshots and CRM-master writes, reconciliation runs); the
-- reconciliation lease window becomes the hot setting reconcile.lease_sec.
set local lock_timeout = '10s';

-- >>> sql/settings.sql (included)
-- Hot settings (§12.3): a typed catalogue, versions with validation status and audit, activation of
-- validated versions only, rollback, and a NOTIFY so workers reload.

insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.entity_type_id', 'integer', null, 128, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, null, false, 'Smart-process field names (ufCrm<type>_...) for alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, false, 'Resolution SLA of an alert (one business day by default).'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, true, 'Terminal stage ID: closed without resolution.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, true, 'Stage ID: in progress.'),
  ('alerts.stage_new', 'text', null, null, null, null, true, 'Stage ID for new alerts.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, true, 'Terminal stage ID: resolved.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, false, 'Rows claimed from a queue per round trip.'),
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, false, 'Lease length for queue rows, workflows, commands and webhooks.'),
  ('limiter.burst', 'integer', '5', 1, 250, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).'),
  ('reconcile.contacts_interval_sec', 'integer', '900', 60, 86400, null, false, 'Incremental Contact reconciliation interval (§10.2: 15 min).'),
  ('reconcile.lease_sec', 'integer', '600', 60, 86400, null, false, 'A reconciliation run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('reconcile.opened_filter', 'enum', '"Y"', null, null, '["Y", "N", "1", "0"]', false, 'Value sent for the opened filter of crm.item.list; the reference documents Y/N for system booleans.'),
  ('reconcile.overlap_sec', 'integer', '120', 0, 3600, null, false, 'Overlap re-read below the watermark.'),
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, false, 'Ops alert when recovered-without-webhook / changed exceeds this share.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, false, 'Ops alert when a run recovers at least this many Contacts without a webhook and more than twice the baseline.'),
  ('retry.base_ms', 'integer', '1000', 10, 600000, null, false, 'Backoff base (full jitter, §9).'),
  ('retry.horizon_sec', 'integer', '86400', 60, 604800, null, false, 'Retry horizon from the first attempt (§9: 24 h).'),
  ('retry.max_ms', 'integer', '300000', 100, 86400000, null, false, 'Backoff cap.'),
  ('worker.poll_interval_ms', 'integer', '2000', 100, 5000, null, false, 'Fallback poll when no NOTIFY arrives (§8: at most 5 s).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, nullable = excluded.nullable,
      description = excluded.description;

create or replace function bitrix_sync._settings_errors(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_def bitrix_sync.settings;
  v_val jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_key text;
  v_num numeric;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return '["values must be a JSON object"]'::jsonb;
  end if;
  for v_key in select k from jsonb_object_keys(p_values) k where k not in (select s.key from bitrix_sync.settings s) loop
    v_errors := v_errors || to_jsonb(format('%s: unknown setting', v_key));
  end loop;
  for v_def in select * from bitrix_sync.settings order by key loop
    v_val := coalesce(p_values -> v_def.key, v_def.default_value, 'null'::jsonb);
    if jsonb_typeof(v_val) = 'null' then
      if not v_def.nullable then
        v_errors := v_errors || to_jsonb(format('%s: a value is required', v_def.key));
      end if;
      continue;
    end if;
    case v_def.value_type
      when 'integer', 'number' then
        if jsonb_typeof(v_val) <> 'number' then
          v_errors := v_errors || to_jsonb(format('%s: must be a number', v_def.key));
          continue;
        end if;
        v_num := (v_val #>> '{}')::numeric;
        if v_def.value_type = 'integer' and v_num <> trunc(v_num) then
          v_errors := v_errors || to_jsonb(format('%s: must be a whole number', v_def.key));
        end if;
        if v_def.min_value is not null and v_num < v_def.min_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at least %s', v_def.key, v_def.min_value));
        end if;
        if v_def.max_value is not null and v_num > v_def.max_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s', v_def.key, v_def.max_value));
        end if;
      when 'text' then
        if jsonb_typeof(v_val) <> 'string' or length(v_val #>> '{}') = 0 then
          v_errors := v_errors || to_jsonb(format('%s: must be a non-empty string', v_def.key));
        end if;
      when 'boolean' then
        if jsonb_typeof(v_val) <> 'boolean' then
          v_errors := v_errors || to_jsonb(format('%s: must be true or false', v_def.key));
        end if;
      when 'enum' then
        if not (v_def.allowed_values @> jsonb_build_array(v_val)) then
          v_errors := v_errors || to_jsonb(format('%s: must be one of %s', v_def.key, v_def.allowed_values));
        end if;
      when 'json' then
        if jsonb_typeof(v_val) <> 'object' then
          v_errors := v_errors || to_jsonb(format('%s: must be a JSON object', v_def.key));
        end if;
    end case;
  end loop;
  -- Cross-field rules.
  if coalesce((p_values ->> 'retry.base_ms')::numeric, 1000) > coalesce((p_values ->> 'retry.max_ms')::numeric, 300000) then
    v_errors := v_errors || to_jsonb('retry.base_ms: must not exceed retry.max_ms'::text);
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;
comment on function bitrix_sync._settings_errors(jsonb) is
  'Validation messages for a complete settings object against the catalogue (types, bounds, allowed values, cross-field rules); empty array when valid.';

create or replace function bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text default null)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_base bitrix_sync.settings_versions;
  v_version integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'settings changes need an actor for the audit'
      using errcode = 'BS004', hint = 'Pass who you are, e.g. ''ops:ivanov''.';
  end if;
  if p_changes is null or jsonb_typeof(p_changes) <> 'object' then
    raise exception 'settings changes must be a JSON object of key -> value'
      using errcode = 'BS008', hint = 'Example: ''{"batch.size": 25}''::jsonb';
  end if;
  select * into v_base from bitrix_sync.settings_versions where status = 'active';
  insert into bitrix_sync.settings_versions (settings_values, based_on, note, created_by)
  values (coalesce(v_base.settings_values, '{}'::jsonb) || p_changes, v_base.version, p_note, btrim(p_actor))
  returning version into v_version;
  return v_version;
end $$;
comment on function bitrix_sync.propose_settings(jsonb, text, text) is
  'Creates a draft version: the active values with p_changes applied. Validate, then activate it.';

create or replace function bitrix_sync.validate_settings_version(p_version integer)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
  v_errors jsonb;
begin
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'draft' then
    raise exception 'settings version % is %, only drafts are validated', p_version, v_row.status
      using errcode = 'BS002', hint = 'Propose a new version with propose_settings().';
  end if;
  v_errors := bitrix_sync._settings_errors(v_row.settings_values);
  update bitrix_sync.settings_versions
     set status = case when jsonb_array_length(v_errors) = 0 then 'validated' else 'rejected' end,
         validation_errors = case when jsonb_array_length(v_errors) = 0 then null else v_errors end,
         validated_at = now()
   where version = p_version;
  return v_errors;
end $$;
comment on function bitrix_sync.validate_settings_version(integer) is
  'draft -> validated, or -> rejected with the reasons (returned and stored). A rejected version can never be activated.';

create or replace function bitrix_sync.activate_settings_version(p_version integer, p_actor text)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'activation needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'validated' then
    raise exception 'settings version % is %; only a validated version can be activated', p_version, v_row.status
      using errcode = 'BS008',
            hint = case when v_row.status = 'draft' then 'Run validate_settings_version() first.'
                        when v_row.status = 'rejected' then 'Fix the values listed in validation_errors and propose a new version.'
                        else 'To return to an earlier version use rollback_settings().' end;
  end if;
  -- Revalidate: the catalogue may have changed since validation.
  if jsonb_array_length(bitrix_sync._settings_errors(v_row.settings_values)) > 0 then
    raise exception 'settings version % no longer validates against the catalogue', p_version
      using errcode = 'BS008', hint = 'Propose a new version.';
  end if;
  update bitrix_sync.settings_versions set status = 'superseded', superseded_at = now() where status = 'active';
  update bitrix_sync.settings_versions set status = 'active', activated_by = btrim(p_actor), activated_at = now()
   where version = p_version
  returning * into v_row;
  perform pg_notify('bitrix_sync_settings', v_row.version::text);
  return v_row;
end $$;
comment on function bitrix_sync.activate_settings_version(integer, text) is
  'validated -> active; the previous active version becomes superseded. Records who and when, and NOTIFYs bitrix_sync_settings.';

create or replace function bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text default null)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_old bitrix_sync.settings_versions;
  v_version integer;
  v_errors jsonb;
begin
  select * into v_old from bitrix_sync.settings_versions where version = p_to_version;
  if not found or v_old.status not in ('superseded', 'active') then
    raise exception 'settings version % was never active; rollback returns to a version that was', p_to_version
      using errcode = 'BS008', hint = 'Pick a superseded version from bitrix_sync.settings_versions.';
  end if;
  insert into bitrix_sync.settings_versions (settings_values, based_on, rollback_of, note, created_by)
  values (v_old.settings_values,
          (select version from bitrix_sync.settings_versions where status = 'active'),
          p_to_version, coalesce(p_note, format('rollback to version %s', p_to_version)), coalesce(btrim(p_actor), ''))
  returning version into v_version;
  v_errors := bitrix_sync.validate_settings_version(v_version);
  if jsonb_array_length(v_errors) > 0 then
    raise exception 'version % does not validate against today''s catalogue: %', p_to_version, v_errors
      using errcode = 'BS008', hint = 'Propose corrected values instead of a rollback.';
  end if;
  return bitrix_sync.activate_settings_version(v_version, p_actor);
end $$;
comment on function bitrix_sync.rollback_settings(integer, text, text) is
  'Activates a new version carrying the values of an earlier active version (rollback_of records which); history stays linear.';

create or replace function bitrix_sync.active_settings() returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select jsonb_object_agg(s.key, coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb))
           || jsonb_build_object('_version', v.version)
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   group by v.version
$$;
comment on function bitrix_sync.active_settings() is
  'The active version''s values with catalogue defaults filled in, plus _version. What workers read and cache.';

create or replace function bitrix_sync._active_setting(p_key text) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_value jsonb;
begin
  select coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb) into v_value
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   where s.key = p_key;
  if not found then
    -- A typo here would silently disable whatever rule reads the setting.
    raise exception 'setting % is not in the catalogue', p_key
      using errcode = 'BS004', hint = 'The keys are the rows of bitrix_sync.settings.';
  end if;
  return v_value;
end $$;
comment on function bitrix_sync._active_setting(text) is
  'One key of the active settings version, the catalogue default filled in (JSON null when unset and nullable). What SQL rules read; an unknown key raises BS004.';

-- A fresh database starts from the catalogue defaults as version 1.
do $$
declare
  v_version integer;
begin
  if not exists (select 1 from bitrix_sync.settings_versions) then
    v_version := bitrix_sync.propose_settings('{}'::jsonb, 'migration', 'catalogue defaults');
    perform bitrix_sync.validate_settings_version(v_version);
    perform bitrix_sync.activate_settings_version(v_version, 'migration');
  end if;
end $$;
-- <<< sql/settings.sql
-- >>> sql/retry.sql (included)
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
-- <<< sql/retry.sql

-- A command's horizon starts at its first send; sent_at is overwritten by every send.
alter table bitrix_sync.crm_commands add column if not exists first_sent_at timestamptz;
comment on column bitrix_sync.crm_commands.first_sent_at is
  'When the command was first sent: its retry horizon starts here (a command never sent counts from created_at).';
-- Commands sent before this migration stamped only deadline_at = first send + the horizon then
-- active. Only the rows that may still be retried need their first send back.
update bitrix_sync.crm_commands
   set first_sent_at = deadline_at
                       - make_interval(secs => (bitrix_sync._active_setting('retry.horizon_sec') #>> '{}')::double precision)
 where first_sent_at is null and attempt_count > 0 and status in ('leased', 'in_flight', 'retry_wait');

-- The stored deadlines follow the setting instead of a fixed 24 hours.
alter table bitrix_sync.crm_commands alter column deadline_at set default bitrix_sync._retry_deadline(now());
alter table bitrix_sync.workflow_instances alter column deadline_at set default bitrix_sync._retry_deadline(now());
comment on column bitrix_sync.crm_commands.deadline_at is
  'Retry horizon: first send + retry.horizon_sec (§9), as of the last retry decision. retry_command decides from first_sent_at and the active setting.';
comment on column bitrix_sync.workflow_instances.deadline_at is
  'Retry horizon: created_at + retry.horizon_sec (§9), as of the last retry decision. schedule_workflow_retry decides from created_at and the active setting.';

alter table bitrix_sync.reconciliation_cursors add column if not exists lease_token uuid;
comment on column bitrix_sync.reconciliation_cursors.lease_token is
  'Fencing token of the running run (claim_reconciliation_cursor); only its holder can finish or fail the run.';

-- >>> sql/queue.sql (included)
-- Leases on han_app.sync_queue (§6.1): short claim transactions with FOR UPDATE SKIP LOCKED, a new
-- lease token on every claim, and completion only under the current token (fencing).

create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable as $$
begin
  if p_code is null or p_code !~ '^[a-z0-9][a-z0-9_.]{0,63}$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
comment on function bitrix_sync._check_code(text) is
  'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';

create or replace function bitrix_sync._refuse_stale(p_what text, p_id text) returns void
language plpgsql as $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;
comment on function bitrix_sync._refuse_stale(text, text) is
  'Raises BS001 for a completion that does not present the current lease token (a stale holder).';

create or replace function bitrix_sync.claim_sync_tasks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof han_app.sync_queue
language plpgsql as $$
declare
  v_watermark timestamptz;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  -- After cutover only intents recorded since the watermark are processed (§17 step 8).
  select c.cutover_watermark into v_watermark from bitrix_sync.cutover c;
  return query
  with due as (
    select q.id, q.next_attempt_at as sort_at from han_app.sync_queue q
     where q.status in ('pending', 'retry_wait') and q.next_attempt_at <= now()
       and q.created_at >= coalesce(v_watermark, '-infinity'::timestamptz)
     order by q.next_attempt_at, q.created_at
     limit p_limit
     for update skip locked
  ), expired as (
    select q.id, q.locked_until as sort_at from han_app.sync_queue q
     where q.status = 'leased' and q.locked_until < now()
     order by q.locked_until
     limit p_limit
     for update skip locked
  ), picked as (
    select id from (select * from due union all select * from expired) c order by sort_at limit p_limit
  )
  update han_app.sync_queue q
     set status = 'leased',
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         lease_token = gen_random_uuid(),
         attempt_count = q.attempt_count + 1,
         updated_at = now()
    from picked
   where q.id = picked.id
  returning q.*;
end $$;
comment on function bitrix_sync.claim_sync_tasks(text, integer, interval) is
  'Claims up to p_limit due intents (pending, due retry_wait, or leased with an expired lease) with FOR UPDATE SKIP LOCKED; each gets a new lease_token. Two claimers never get the same row.';

create or replace function bitrix_sync.extend_sync_task_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue set locked_until = now() + p_lease, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_sync_task_lease(uuid, uuid, interval) is
  'Extends a held lease. Refuses a stale token (BS001).';

create or replace function bitrix_sync.complete_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.complete_sync_task(uuid, uuid) is
  'leased -> processed under the current lease token; a stale holder is refused (BS001).';

create or replace function bitrix_sync.release_sync_task(p_id uuid, p_lease_token uuid)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'pending', locked_by = null, locked_until = null, lease_token = null,
         attempt_count = greatest(attempt_count - 1, 0), updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_sync_task(uuid, uuid) is
  'leased -> pending without spending an attempt (shutdown, paused sync). Refuses a stale token (BS001).';

create or replace function bitrix_sync._dead_letter_sync_task_row(p_row han_app.sync_queue, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  update han_app.sync_queue
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_row.id
  returning * into v_row;
  -- The intent's first attempt is its arrival: it is claimed as soon as it is due.
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, operation, error_code, attempt_count, first_attempt_at, deadline_at)
  values ('sync_queue', v_row.id::text, v_row.task_type, p_error_code, v_row.attempt_count, v_row.created_at,
          bitrix_sync._retry_deadline(v_row.created_at));
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue, text) is
  'Internal: moves a held intent to dead_letter and writes its technical DLQ row (first attempt = created_at).';

create or replace function bitrix_sync.retry_sync_task(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  if now() + greatest(p_delay, interval '0') > bitrix_sync._retry_deadline(v_row.created_at) then
    return bitrix_sync._dead_letter_sync_task_row(v_row, 'retry_horizon_exceeded');
  end if;
  update han_app.sync_queue
     set status = 'retry_wait', next_attempt_at = now() + greatest(p_delay, interval '0'),
         last_error_code = p_error_code, last_error_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.retry_sync_task(uuid, uuid, text, interval) is
  'leased -> retry_wait after p_delay with a safe error code; when the retry would fall past the horizon (created_at + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead. The returned status says which. Refuses a stale token (BS001).';

create or replace function bitrix_sync.dead_letter_sync_task(p_id uuid, p_lease_token uuid, p_error_code text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_error_code);
  select * into v_row from han_app.sync_queue
   where id = p_id and status = 'leased' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return bitrix_sync._dead_letter_sync_task_row(v_row, p_error_code);
end $$;
comment on function bitrix_sync.dead_letter_sync_task(uuid, uuid, text) is
  'leased -> dead_letter and a technical_dead_letters row with the safe code. Refuses a stale token (BS001).';

create or replace function bitrix_sync.cancel_sync_task(p_id uuid, p_lease_token uuid, p_reason text)
returns han_app.sync_queue
language plpgsql as $$
declare
  v_row han_app.sync_queue;
begin
  perform bitrix_sync._check_code(p_reason);
  update han_app.sync_queue
     set status = 'cancelled', cancel_reason = p_reason, completed_at = now(),
         locked_by = null, locked_until = null, lease_token = null, updated_at = now()
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('sync task', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.cancel_sync_task(uuid, uuid, text) is
  'leased -> cancelled with a reason code (e.g. user not eligible). Refuses a stale token (BS001).';
-- <<< sql/queue.sql
-- >>> sql/workflows.sql (included)
-- Workflows (§7.1): one active workflow per user; persisted transitions by event name, fenced by
-- the lease token of the worker stepping the workflow.

create or replace function bitrix_sync.start_or_join_workflow(
  p_user_id uuid, p_intent_type text, p_source_task_id uuid, p_content_hash text
) returns table (workflow_id uuid, action text)
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  for v_try in 1..3 loop
    select * into v_row from bitrix_sync.workflow_instances w
     where w.user_id = p_user_id and w.state not in ('succeeded', 'failed', 'cancelled')
     for update;
    if found then
      -- Same intent with the same desired content: nothing new to converge to.
      if v_row.intent_type = p_intent_type and v_row.content_hash is not distinct from p_content_hash then
        return query select v_row.id, 'unchanged'::text;
        return;
      end if;
      update bitrix_sync.workflow_instances w
         set revision = w.revision + 1, intent_type = p_intent_type, source_task_id = p_source_task_id,
             content_hash = p_content_hash,
             -- A workflow parked in waiting_manual may now be fixable by the newer intent
             -- (manual_resume); a waiting_retry one is due at once.
             state = case when w.state = 'waiting_manual' then 'running' else w.state end,
             next_attempt_at = least(w.next_attempt_at, now())
       where w.id = v_row.id;
      return query select v_row.id, 'joined'::text;
      return;
    end if;
    -- The user's last workflow already converged to exactly this content: a semantically equal intent.
    if p_content_hash is not null and exists (
         select 1 from bitrix_sync.workflow_instances w
          where w.id = (select l.id from bitrix_sync.workflow_instances l
                         where l.user_id = p_user_id order by l.created_at desc limit 1)
            and w.state = 'succeeded' and w.intent_type = p_intent_type
            and w.content_hash = p_content_hash) then
      return query select null::uuid, 'unchanged'::text;
      return;
    end if;
    begin
      insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id, content_hash)
      values (p_intent_type, p_intent_type, p_user_id, p_source_task_id, p_content_hash)
      returning * into v_row;
    exception when unique_violation then
      -- Two intents of one user claimed at once: the other call started the workflow first and has
      -- committed by now (the index waited for it), so look again and join it.
      if v_try = 3 then
        raise;
      end if;
      continue;
    end;
    perform pg_notify('bitrix_sync_workflows', '');
    return query select v_row.id, 'started'::text;
    return;
  end loop;
end $$;
comment on function bitrix_sync.start_or_join_workflow(uuid, text, uuid, text) is
  'Starts a workflow for the user, or joins the active one: a different intent or content bumps its revision (the workflow converges to it after its current step). Equal intent and content hash, on the active workflow or on the user''s last succeeded one, changes nothing (action unchanged).';

create or replace function bitrix_sync.claim_workflows(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.workflow_instances
language plpgsql as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  return query
  with picked as (
    select w.id from bitrix_sync.workflow_instances w
     where w.state in ('created', 'running', 'waiting_retry')
       and w.next_attempt_at <= now()
       and (w.lease_token is null or w.locked_until < now())
     order by w.next_attempt_at, w.created_at
     limit p_limit
     for update skip locked
  )
  update bitrix_sync.workflow_instances w
     set state = 'running',
         lease_token = gen_random_uuid(),
         locked_by = left(p_worker, 128),
         locked_until = now() + p_lease,
         attempt_count = w.attempt_count + 1
    from picked
   where w.id = picked.id
  returning w.*;
end $$;
comment on function bitrix_sync.claim_workflows(text, integer, interval) is
  'Leases runnable workflows (created, running, due waiting_retry; expired leases reclaimed) with SKIP LOCKED and a new token; created -> running (start), waiting_retry -> running (retry_due).';

create or replace function bitrix_sync.fire_workflow_event(
  p_id uuid, p_lease_token uuid, p_event text, p_changes jsonb default '{}'::jsonb
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_to text;
  v_bad text;
begin
  select * into v_row from bitrix_sync.workflow_instances where id = p_id for update;
  if not found then
    raise exception 'workflow % does not exist', p_id
      using errcode = 'BS005', hint = 'Check the workflow id.';
  end if;
  if v_row.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  select e.to_state into v_to from bitrix_sync.state_edges e
   where e.machine = 'workflow' and e.from_state = v_row.state and e.event = p_event;
  if v_to is null then
    raise exception 'workflow event % is not allowed in state %', p_event, v_row.state
      using errcode = 'BS002', hint = 'docs/state-machines.md lists the events of each state.';
  end if;
  select string_agg(k, ', ') into v_bad from jsonb_object_keys(coalesce(p_changes, '{}'::jsonb)) k
   where k not in ('current_step', 'step_data', 'contact_id', 'outcome', 'last_error_code', 'next_attempt_at',
                   'processed_revision');
  if v_bad is not null then
    raise exception 'workflow event cannot change %', v_bad
      using errcode = 'BS004', hint = 'Allowed: current_step, step_data, contact_id, outcome, last_error_code, next_attempt_at, processed_revision.';
  end if;
  if p_changes ? 'last_error_code' and p_changes ->> 'last_error_code' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'last_error_code');
  end if;
  if p_changes ? 'outcome' and p_changes ->> 'outcome' is not null then
    perform bitrix_sync._check_code(p_changes ->> 'outcome');
  end if;

  update bitrix_sync.workflow_instances w
     set state = v_to,
         current_step = coalesce(p_changes ->> 'current_step', w.current_step),
         step_data = case when p_changes ? 'step_data' then p_changes -> 'step_data' else w.step_data end,
         contact_id = case when p_changes ? 'contact_id' then p_changes ->> 'contact_id' else w.contact_id end,
         outcome = case when p_changes ? 'outcome' then p_changes ->> 'outcome' else w.outcome end,
         last_error_code = case when p_changes ? 'last_error_code' then p_changes ->> 'last_error_code' else w.last_error_code end,
         next_attempt_at = coalesce((p_changes ->> 'next_attempt_at')::timestamptz,
                                    case when v_to = 'running' then w.next_attempt_at else now() end),
         processed_revision = coalesce((p_changes ->> 'processed_revision')::integer, w.processed_revision),
         -- The lease belongs to a worker stepping a running workflow; any other state releases it.
         lease_token = case when v_to = 'running' then w.lease_token end,
         locked_by = case when v_to = 'running' then w.locked_by end,
         locked_until = case when v_to = 'running' then w.locked_until end,
         finished_at = case when v_to in ('succeeded', 'failed', 'cancelled') then now() end
   where w.id = p_id
  returning * into v_row;
  if v_to in ('waiting_retry', 'running') then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fire_workflow_event(uuid, uuid, text, jsonb) is
  'Moves a workflow along the edge named p_event from its current state (bitrix_sync.state_edges), applying the allowed changes. The caller must present the current lease token (null when none is held); stale holders get BS001, illegal events BS002.';

create or replace function bitrix_sync.extend_workflow_lease(p_id uuid, p_lease_token uuid, p_lease interval)
returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  update bitrix_sync.workflow_instances set locked_until = now() + p_lease
   where id = p_id and state = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.extend_workflow_lease(uuid, uuid, interval) is
  'Extends the lease of a running workflow. Refuses a stale token (BS001).';

create or replace function bitrix_sync._held_workflow(p_id uuid, p_lease_token uuid)
returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  select * into v_row from bitrix_sync.workflow_instances
   where id = p_id and state = 'running' and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('workflow', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._held_workflow(uuid, uuid) is
  'Internal: the running workflow, locked, when the caller presents its current lease token; otherwise BS001.';

create or replace function bitrix_sync.save_workflow_step(
  p_id uuid, p_lease_token uuid, p_step_data jsonb, p_current_step text default null
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
begin
  if p_step_data is null or jsonb_typeof(p_step_data) <> 'object' then
    raise exception 'step data must be a JSON object'
      using errcode = 'BS004', hint = 'Pass the workflow''s safe step state (IDs, flags, counts), e.g. ''{"pass": 1}''.';
  end if;
  if p_current_step is not null and p_current_step !~ '^[a-z][a-z0-9_]{0,63}$' then
    raise exception 'a step name is a snake_case identifier of at most 64 characters'
      using errcode = 'BS004', hint = 'Pass the planner''s step name, e.g. find_by_phone.';
  end if;
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  update bitrix_sync.workflow_instances
     set step_data = p_step_data, current_step = coalesce(p_current_step, current_step)
   where id = p_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.save_workflow_step(uuid, uuid, jsonb, text) is
  'Persists the step state (and, when given, the step name) of a running workflow without a state change. Fenced by the workflow''s lease token (BS001).';

create or replace function bitrix_sync.schedule_workflow_retry(
  p_id uuid, p_lease_token uuid, p_error_code text, p_delay interval
) returns bitrix_sync.workflow_instances
language plpgsql as $$
declare
  v_row bitrix_sync.workflow_instances;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  v_row := bitrix_sync._held_workflow(p_id, p_lease_token);
  -- A workflow is first attempted when it is created: intake starts it at once.
  v_deadline := bitrix_sync._retry_deadline(v_row.created_at);
  if now() + greatest(p_delay, interval '0') > v_deadline then
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'fail',
               jsonb_build_object('last_error_code', 'retry_horizon_exceeded', 'outcome', 'failed'));
    insert into bitrix_sync.technical_dead_letters
      (source, source_id, workflow_id, operation, error_code, attempt_count, first_attempt_at, deadline_at,
       correlation_id)
    values ('workflow', v_row.id::text, v_row.id, v_row.workflow_type, 'retry_horizon_exceeded',
            v_row.attempt_count, v_row.created_at, v_deadline, v_row.correlation_id);
  else
    v_row := bitrix_sync.fire_workflow_event(p_id, p_lease_token, 'schedule_retry',
               jsonb_build_object('last_error_code', p_error_code,
                                  'next_attempt_at', now() + greatest(p_delay, interval '0')));
  end if;
  update bitrix_sync.workflow_instances set deadline_at = v_deadline where id = p_id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.schedule_workflow_retry(uuid, uuid, text, interval) is
  'A step failed: running -> waiting_retry (schedule_retry) due after p_delay; when that falls past the horizon (created_at + retry.horizon_sec) -> failed with retry_horizon_exceeded and a technical DLQ row instead. The returned state says which. Fenced by the lease token (BS001).';
-- <<< sql/workflows.sql
-- >>> sql/commands.sql (included)
-- CRM commands (§7.2, §8, §9): issued by a workflow step, claimed by the pump under a lease,
-- marked in_flight (the durable "send started" marker) before the HTTP batch leaves, and completed
-- per sub-result. A write with no reply becomes uncertain and is never resent blindly.

create or replace function bitrix_sync._is_write_command(p_command_type text) returns boolean
language sql immutable parallel safe as $$
  select p_command_type in ('contact.add', 'contact.update', 'alert.add', 'alert.update')
$$;
comment on function bitrix_sync._is_write_command(text) is
  'Commands that change the CRM: a lost reply to one of these is uncertain, not retryable.';

create or replace function bitrix_sync._wake_workflow(p_workflow_id uuid) returns void
language plpgsql as $$
begin
  -- A command reached an outcome the workflow must look at: waiting_crm -> running (crm_replied).
  update bitrix_sync.workflow_instances
     set state = 'running', next_attempt_at = now()
   where id = p_workflow_id and state = 'waiting_crm';
  if found then
    perform pg_notify('bitrix_sync_workflows', '');
  end if;
end $$;
comment on function bitrix_sync._wake_workflow(uuid) is
  'waiting_crm -> running for the workflow owning a command that succeeded, failed for good or became uncertain.';

create or replace function bitrix_sync.issue_command(
  p_workflow_id uuid, p_lease_token uuid, p_command_type text, p_params jsonb, p_step text
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
begin
  select * into v_wf from bitrix_sync.workflow_instances where id = p_workflow_id for update;
  if not found or v_wf.state <> 'running' or v_wf.lease_token is distinct from p_lease_token then
    perform bitrix_sync._refuse_stale('workflow', p_workflow_id::text);
  end if;
  insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id)
  values (p_workflow_id, p_command_type, coalesce(p_params, '{}'::jsonb), v_wf.revision, v_wf.correlation_id)
  returning * into v_cmd;
  perform bitrix_sync.fire_workflow_event(p_workflow_id, p_lease_token, 'await_crm',
                                          jsonb_build_object('current_step', p_step));
  perform pg_notify('bitrix_sync_commands', '');
  return v_cmd;
end $$;
comment on function bitrix_sync.issue_command(uuid, uuid, text, jsonb, text) is
  'One persisted step: inserts the workflow''s next command and moves the workflow running -> waiting_crm at step p_step. The unique index allows one active command per workflow.';

create or replace function bitrix_sync.issue_alert_command(p_alert_id bigint, p_command_type text, p_params jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
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
  p_worker text, p_limit integer default 20, p_lease interval default interval '60 seconds'
) returns setof bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row record;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the batch.size and lease.ttl_sec settings.';
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
  'Leases up to p_limit due commands (FIFO by next_attempt_at, id; retries do not block new work) with SKIP LOCKED and new tokens. First recovers holders that died: expired in_flight writes -> uncertain, reads -> retry_wait.';

-- The horizon used to be passed in by the pump; it is read from the settings here now.
drop function if exists bitrix_sync.send_commands(bigint[], uuid[], uuid, interval);

create or replace function bitrix_sync.send_commands(p_ids bigint[], p_lease_tokens uuid[], p_batch_id uuid)
returns setof bigint
language plpgsql as $$
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
   where c.id = t.id and c.status = 'leased' and c.lease_token = t.token
  returning c.id;
end $$;
comment on function bitrix_sync.send_commands(bigint[], uuid[], uuid) is
  'leased -> in_flight for the commands still held under their tokens; returns the ids marked. Commit this before the HTTP batch leaves: it is the durable send-started marker. The first send stamps first_sent_at, where the retry horizon starts.';

create or replace function bitrix_sync.complete_command(p_id bigint, p_lease_token uuid, p_response jsonb)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'succeeded', response = p_response, completed_at = now(), last_error_code = null,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
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

create or replace function bitrix_sync.release_command(p_id bigint, p_lease_token uuid)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  update bitrix_sync.crm_commands
     set status = 'pending', lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'leased' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.release_command(bigint, uuid) is
  'leased -> pending without sending (no limiter token, method blocked, shutdown). Refuses stale tokens (BS001).';

create or replace function bitrix_sync._check_bitrix_error(p_error text) returns void
language plpgsql immutable as $$
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
language sql stable as $$
  -- A command refused before it was ever sent has only its creation to count from.
  select coalesce(p_row.first_sent_at, p_row.created_at)
$$;
comment on function bitrix_sync._command_first_attempt(bitrix_sync.crm_commands) is
  'Internal: where a command''s retry horizon starts: its first send, or its creation if it was never sent.';

create or replace function bitrix_sync._dead_letter_command_row(
  p_row bitrix_sync.crm_commands, p_error_code text, p_http_status integer, p_bitrix_error text
) returns bitrix_sync.crm_commands
language plpgsql as $$
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
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error,
     attempt_count, first_attempt_at, deadline_at, correlation_id)
  values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
          p_http_status, left(p_bitrix_error, 64), v_row.attempt_count - v_row.limit_hits,
          v_first, v_row.deadline_at, v_row.correlation_id);
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
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
  v_deadline timestamptz;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
   for update;
  if not found then
    perform bitrix_sync._refuse_stale('command', p_id::text);
  end if;
  -- The horizon from the first attempt (§9): past it the command goes to the technical DLQ.
  v_deadline := bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row));
  if now() + greatest(p_delay, interval '0') > v_deadline then
    return bitrix_sync._dead_letter_command_row(v_row, 'retry_horizon_exceeded', p_http_status, p_bitrix_error);
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
  'leased|in_flight -> retry_wait after p_delay. p_spends_attempt = false for rate-limit refusals (counted in limit_hits). When the retry would fall past the horizon (first send + retry.horizon_sec) -> dead_letter with retry_horizon_exceeded and a technical DLQ row instead; the returned status says which. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.mark_command_uncertain(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'uncertain', last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status = 'in_flight' and lease_token = p_lease_token
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
  'in_flight -> uncertain: the request left and no reply came. The workflow recovers by searching, never by resending. Refuses stale tokens (BS001).';

create or replace function bitrix_sync.dead_letter_command(
  p_id bigint, p_lease_token uuid, p_error_code text, p_http_status integer default null,
  p_bitrix_error text default null
) returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  perform bitrix_sync._check_bitrix_error(p_bitrix_error);
  select * into v_row from bitrix_sync.crm_commands
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
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
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  select c.* into v_row from bitrix_sync.crm_commands c
    join bitrix_sync.workflow_instances w on w.id = c.workflow_id
   where c.id = p_command_id and w.state = 'running' and w.lease_token = p_workflow_token
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
language plpgsql as $$
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
language plpgsql as $$
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
      update bitrix_sync.crm_commands
         set status = 'retry_wait', next_attempt_at = now(),
             last_error_code = coalesce(p_error_code, 'reconciled_not_applied')
       where id = p_id returning * into v_row;
    when 'dead_letter' then
      perform bitrix_sync._check_code(p_error_code);
      update bitrix_sync.crm_commands set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code
       where id = p_id returning * into v_row;
      insert into bitrix_sync.technical_dead_letters
        (source, source_id, workflow_id, command_id, operation, error_code, attempt_count, first_attempt_at,
         deadline_at, correlation_id)
      values ('crm_command', v_row.id::text, v_row.workflow_id, v_row.id, v_row.command_type, p_error_code,
              v_row.attempt_count - v_row.limit_hits, bitrix_sync._command_first_attempt(v_row),
              bitrix_sync._retry_deadline(bitrix_sync._command_first_attempt(v_row)), v_row.correlation_id);
    else
      raise exception 'reconcile outcome must be succeeded, retry or dead_letter, got %', p_outcome
        using errcode = 'BS004', hint = 'See §7.2: reconcile -> succeeded | retry_wait | dead_letter.';
  end case;
  return v_row;
end $$;
comment on function bitrix_sync.resolve_command_reconcile(bigint, uuid, text, jsonb, text) is
  'reconcile -> succeeded (the search found the write applied), retry_wait (proved not applied) or dead_letter. Fenced by the workflow lease.';

create or replace function bitrix_sync.reject_command(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.crm_commands
language plpgsql as $$
declare
  v_row bitrix_sync.crm_commands;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.crm_commands
     set status = 'dead_letter', completed_at = now(), last_error_code = p_error_code,
         lease_token = null, locked_by = null, locked_until = null
   where id = p_id and status in ('leased', 'in_flight') and lease_token = p_lease_token
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
-- <<< sql/commands.sql
-- >>> sql/webhooks.sql (included)
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
language plpgsql as $$
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

create or replace function bitrix_sync.claim_webhooks(
  p_worker text, p_limit integer default 10, p_lease interval default interval '60 seconds',
  p_receiver text default null
) returns setof bitrix_sync.webhook_inbox
language plpgsql as $$
declare
  v_cand record;
  v_row bitrix_sync.webhook_inbox;
  v_claimed integer := 0;
begin
  if p_limit is null or p_limit < 1 or p_limit > 1000 or p_lease is null or p_lease <= interval '0' then
    raise exception 'claim needs 1..1000 rows and a positive lease'
      using errcode = 'BS004', hint = 'Check the claim.size and lease.ttl_sec settings.';
  end if;
  for v_cand in
    select w.id, w.receiver, w.entity_id, w.status from bitrix_sync.webhook_inbox w
     where (p_receiver is null or w.receiver = p_receiver)
       and ((w.status in ('received', 'retry_wait') and w.next_attempt_at <= now())
            or (w.status = 'processing' and w.locked_until < now()))
     order by w.id
     limit p_limit * 4
     for update skip locked
  loop
    exit when v_claimed >= p_limit;
    -- Another claimer that has an event of this entity in flight holds this lock until it commits.
    -- Skipping instead of waiting on its uncommitted index entry avoids a lock cycle between two
    -- claimers that picked events of the same two entities in crossed order (a deadlock error).
    continue when not pg_try_advisory_xact_lock(hashtext('bitrix_sync.webhook_inbox'),
                                                hashtext(v_cand.receiver || ':' || v_cand.entity_id));
    begin
      -- The status test skips candidates this loop has just coalesced into an earlier one.
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
    v_claimed := v_claimed + 1;
    return next v_row;
  end loop;
end $$;
comment on function bitrix_sync.claim_webhooks(text, integer, interval, text) is
  'Leases due inbox events, at most one per entity (enforced by a partial unique index), and coalesces the entity''s other received events into the claimed one.';

create or replace function bitrix_sync.complete_webhook(p_id bigint, p_lease_token uuid, p_outcome text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
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

create or replace function bitrix_sync._dead_letter_webhook_row(p_row bitrix_sync.webhook_inbox, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
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
  insert into bitrix_sync.technical_dead_letters
    (source, source_id, operation, error_code, attempt_count, first_attempt_at, deadline_at)
  values ('webhook', v_row.id::text, 'webhook.' || v_row.receiver, p_error_code, v_row.attempt_count,
          v_row.received_at, bitrix_sync._retry_deadline(v_row.received_at));
  return v_row;
end $$;
comment on function bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox, text) is
  'Internal: moves a held event to dead_letter with its coalesced events and writes the technical DLQ row (first attempt = received_at).';

create or replace function bitrix_sync.retry_webhook(p_id bigint, p_lease_token uuid, p_error_code text, p_delay interval)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
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

create or replace function bitrix_sync.dead_letter_webhook(p_id bigint, p_lease_token uuid, p_error_code text)
returns bitrix_sync.webhook_inbox
language plpgsql as $$
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
-- <<< sql/webhooks.sql
-- >>> sql/alerts.sql (included)
-- Business alerts (§11): one open alert per (type, fingerprint); a repeat bumps occurrence_count;
-- after a terminal stage a new case opens a new alert linked to the previous one.

create or replace function bitrix_sync.raise_business_alert(
  p_alert_type text, p_severity text, p_fingerprint text, p_user_id uuid,
  p_current_contact_id text default null, p_selected_contact_id text default null,
  p_candidate_contact_ids jsonb default '[]'::jsonb, p_details jsonb default '{}'::jsonb,
  p_correlation_id uuid default null
) returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
  v_previous bigint;
begin
  perform bitrix_sync._check_code(p_alert_type);
  update bitrix_sync.business_alerts a
     set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(),
         current_contact_id = coalesce(p_current_contact_id, a.current_contact_id),
         selected_contact_id = coalesce(p_selected_contact_id, a.selected_contact_id),
         candidate_contact_ids = coalesce(p_candidate_contact_ids, a.candidate_contact_ids),
         details = coalesce(p_details, a.details),
         correlation_id = coalesce(p_correlation_id, a.correlation_id),
         crm_sync_status = 'pending'
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select max(a.id) into v_previous from bitrix_sync.business_alerts a
   where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint;
  insert into bitrix_sync.business_alerts
    (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id,
     candidate_contact_ids, details, previous_alert_id, correlation_id)
  values (p_alert_type, p_severity, p_fingerprint, p_user_id, p_current_contact_id, p_selected_contact_id,
          coalesce(p_candidate_contact_ids, '[]'::jsonb), coalesce(p_details, '{}'::jsonb), v_previous, p_correlation_id)
  returning * into v_row;
  return v_row;
exception
  when unique_violation then
    -- A concurrent raise opened it first: count this occurrence on that row.
    update bitrix_sync.business_alerts a
       set occurrence_count = a.occurrence_count + 1, last_occurred_at = now(), crm_sync_status = 'pending'
     where a.alert_type = p_alert_type and a.fingerprint = p_fingerprint and a.status = 'open'
    returning * into v_row;
    return v_row;
end $$;
comment on function bitrix_sync.raise_business_alert(text, text, text, uuid, text, text, jsonb, jsonb, uuid) is
  'Opens a business alert or, if one is open for (type, fingerprint), counts another occurrence on it. A new case after a closed one links previous_alert_id. details must already be masked.';

create or replace function bitrix_sync.record_alert_item(p_alert_id bigint, p_item_id bigint, p_stage_id text)
returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts
     set item_id = coalesce(p_item_id, item_id), stage_id = coalesce(p_stage_id, stage_id)
   where id = p_alert_id
  returning * into v_row;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.record_alert_item(bigint, bigint, text) is
  'Records the smart-process item and stage after a successful add/update/get. crm_sync_status is left alone: a newer occurrence may already have set it back to pending.';

create or replace function bitrix_sync.finish_business_alert(p_alert_id bigint, p_status text, p_stage_id text default null)
returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  if p_status not in ('resolved', 'closed', 'remote_missing') then
    raise exception 'an alert finishes as resolved, closed or remote_missing, not %', p_status
      using errcode = 'BS004', hint = 'See §11 and §10.3.';
  end if;
  update bitrix_sync.business_alerts
     set status = p_status, stage_id = coalesce(p_stage_id, stage_id), closed_at = now()
   where id = p_alert_id and status = 'open'
  returning * into v_row;
  if not found then
    raise exception 'business alert % is not open', p_alert_id
      using errcode = 'BS002', hint = 'A finished alert stays finished; a new case opens a new alert.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_business_alert(bigint, text, text) is
  'open -> resolved | closed (terminal stage seen) | remote_missing (item deleted in the CRM).';

create or replace function bitrix_sync.mark_alert_mirrored(p_alert_id bigint)
returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  update bitrix_sync.business_alerts set crm_sync_status = 'synced'
   where id = p_alert_id and crm_sync_status = 'pending'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from bitrix_sync.business_alerts where id = p_alert_id;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  raise exception 'business alert % is %, not pending: nothing to mirror', p_alert_id, v_row.crm_sync_status
    using errcode = 'BS002', hint = 'Only an alert whose change is pending is handed to the CRM; issue its command first.';
end $$;
comment on function bitrix_sync.mark_alert_mirrored(bigint) is
  'crm_sync_status pending -> synced once the alert''s add/update command is issued. A newer occurrence sets it back to pending. Refuses an alert that is not pending (BS002).';

create or replace function bitrix_sync.mark_alert_mirror_failed(p_alert_id bigint)
returns bitrix_sync.business_alerts
language plpgsql as $$
declare
  v_row bitrix_sync.business_alerts;
begin
  -- Only a mirror in progress can fail. A pending alert has a newer change still to send, whose
  -- command supersedes the one that failed, so it stays pending.
  update bitrix_sync.business_alerts set crm_sync_status = 'failed'
   where id = p_alert_id and crm_sync_status = 'synced'
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from bitrix_sync.business_alerts where id = p_alert_id;
  if not found then
    raise exception 'business alert % does not exist', p_alert_id using errcode = 'BS005', hint = 'Check the alert id.';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.mark_alert_mirror_failed(bigint) is
  'crm_sync_status synced -> failed when the alert''s command failed for good (visible in status). A pending alert keeps its newer change queued; a failed one stays failed.';

create or replace function bitrix_sync._resolve_conflict_alerts(p_user_id uuid) returns integer
language plpgsql as $$
declare
  v_count integer;
begin
  update bitrix_sync.business_alerts
     set status = 'resolved', closed_at = now(), crm_sync_status = 'pending'
   where user_id = p_user_id and status = 'open'
     and alert_type in ('contact_bound_to_other_user', 'duplicate_contacts', 'user_id_mismatch', 'contact_not_found');
  get diagnostics v_count = row_count;
  return v_count;
end $$;
comment on function bitrix_sync._resolve_conflict_alerts(uuid) is
  'Internal (complete_rebind): open -> resolved for the user''s link conflicts (bound to another user, duplicates, user_id mismatch, Contact not found); the smart-process items are updated again (crm_sync_status pending). Returns how many.';
-- <<< sql/alerts.sql
-- >>> sql/rebind.sql (included)
-- Audited rebind request (§5.4): an admin asks to move a user's link to another Contact. The
-- procedure records the request and starts a contact.rebind workflow; the mapping itself changes
-- only when the workflow has updated both Contacts.

create or replace function bitrix_sync.request_bitrix_contact_rebind(
  user_id uuid, target_b24_id text, reason text, operator_id text
) returns uuid
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_current bitrix_sync.entity_external_mapping;
  v_request_id uuid;
  v_workflow_id uuid;
  v_user_id constant uuid := request_bitrix_contact_rebind.user_id;
  v_target constant text := btrim(request_bitrix_contact_rebind.target_b24_id);
begin
  if v_user_id is null or v_target is null or v_target !~ '^[1-9][0-9]{0,17}$' then
    raise exception 'target_b24_id must be a Bitrix24 Contact ID (digits only) and user_id is required'
      using errcode = 'BS004', hint = 'Example: select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''12345'', ''duplicate merged by CRM team'', ''ops:ivanov'');';
  end if;
  if reason is null or length(btrim(reason)) < 3 or operator_id is null or length(btrim(operator_id)) = 0 then
    raise exception 'a reason (3 to 500 characters) and an operator_id are required for the audit'
      using errcode = 'BS004', hint = 'Say why the link is wrong and who you are.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = v_user_id and u.record_status = 'active') then
    raise exception 'user % does not exist or is not active', v_user_id
      using errcode = 'BS005', hint = 'Only active users are linked to Contacts.';
  end if;

  -- 1. lock the user's current active mapping (there may be none).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_user_id and m.status = 'active'
   for update;
  if found and v_current.external_id = v_target then
    raise exception 'user % is already linked to Contact %', v_user_id, v_target
      using errcode = 'BS006', hint = 'Nothing to do.';
  end if;
  -- 2. the target must not be actively linked to another user.
  perform 1 from bitrix_sync.entity_external_mapping m
   where m.external_entity_type = 'contact' and m.external_id = v_target and m.status = 'active'
   for update;
  if found then
    raise exception 'Contact % is actively linked to another user', v_target
      using errcode = 'BS006',
            hint = 'Resolve that user''s link first (deactivate or rebind it); a Contact cannot serve two active users.';
  end if;
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.user_id = v_user_id and r.status in ('requested', 'in_progress')) then
    raise exception 'a rebind of user % is already in progress', v_user_id
      using errcode = 'BS007', hint = 'Wait for it to finish (bitrix_sync.status views), then ask again.';
  end if;
  if exists (select 1 from bitrix_sync.workflow_instances w
              where w.user_id = v_user_id and w.state not in ('succeeded', 'failed', 'cancelled')) then
    raise exception 'user % has a sync workflow running', v_user_id
      using errcode = 'BS007', hint = 'Retry when it has finished; a user has one workflow at a time.';
  end if;

  -- 3. the request and its workflow; the mapping is untouched (4).
  insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, contact_id, step_data)
  values ('contact.rebind', 'contact.rebind', v_user_id, v_target,
          jsonb_build_object('previous_contact_id', v_current.external_id, 'target_contact_id', v_target))
  returning id into v_workflow_id;
  insert into bitrix_sync.rebind_requests (user_id, previous_contact_id, target_contact_id, reason, operator_id, workflow_id)
  values (v_user_id, v_current.external_id, v_target, btrim(reason), btrim(operator_id), v_workflow_id)
  returning id into v_request_id;
  perform pg_notify('bitrix_sync_workflows', '');
  return v_request_id;
end $$;
comment on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) is
  'Admin entry point (§5.4): validates the request, locks the current mapping, refuses a target linked to another active user, records an audited rebind_requests row and starts a contact.rebind workflow. Does not change the mapping. Returns the request id.';

create or replace function bitrix_sync._rebind_request_of(p_workflow_id uuid) returns bitrix_sync.rebind_requests
language plpgsql as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  select * into v_row from bitrix_sync.rebind_requests where workflow_id = p_workflow_id for update;
  if not found then
    raise exception 'workflow % has no rebind request', p_workflow_id
      using errcode = 'BS005', hint = 'A contact.rebind workflow is started only by request_bitrix_contact_rebind().';
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._rebind_request_of(uuid) is
  'Internal: the rebind request a contact.rebind workflow serves, locked; BS005 when there is none.';

create or replace function bitrix_sync.start_rebind_request(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status = 'in_progress' then
    -- The workflow began this pass again (a Contact vanished mid-way): already started.
    return v_row;
  end if;
  if v_row.status <> 'requested' then
    raise exception 'rebind request % is %, it cannot start', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished; ask again with request_bitrix_contact_rebind().';
  end if;
  update bitrix_sync.rebind_requests set status = 'in_progress' where id = v_row.id returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.start_rebind_request(uuid, uuid) is
  'requested -> in_progress when the contact.rebind workflow starts reading the Contacts (a request already in progress is returned as it is). Fenced by the workflow''s lease token (BS001).';

create or replace function bitrix_sync.fail_rebind_request(p_workflow_id uuid, p_lease_token uuid, p_failure_code text)
returns bitrix_sync.rebind_requests
language plpgsql as $$
declare
  v_row bitrix_sync.rebind_requests;
begin
  perform bitrix_sync._check_code(p_failure_code);
  perform bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is %, it cannot fail', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'A finished request stays finished.';
  end if;
  update bitrix_sync.rebind_requests
     set status = 'failed', failure_code = p_failure_code, completed_at = now()
   where id = v_row.id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.fail_rebind_request(uuid, uuid, text) is
  'requested | in_progress -> failed with a safe failure code (target bound to another user, not found, CRM failure, user not eligible). The mapping is untouched. Fenced by the workflow''s lease token (BS001).';

create or replace function bitrix_sync.complete_rebind(p_workflow_id uuid, p_lease_token uuid)
returns bitrix_sync.rebind_requests
language plpgsql as $$
declare
  v_wf bitrix_sync.workflow_instances;
  v_row bitrix_sync.rebind_requests;
  v_current bitrix_sync.entity_external_mapping;
begin
  v_wf := bitrix_sync._held_workflow(p_workflow_id, p_lease_token);
  v_row := bitrix_sync._rebind_request_of(p_workflow_id);
  if v_row.status <> 'in_progress' then
    raise exception 'rebind request % is %, not in_progress', v_row.id, v_row.status
      using errcode = 'BS002', hint = 'start_rebind_request() first; a finished request stays finished.';
  end if;
  -- Both Contacts are updated: the link moves, the request ends and the conflicts that led to it are
  -- resolved in one transaction (§5.4, §11).
  select * into v_current from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = v_wf.user_id and m.status = 'active'
   for update;
  if found then
    perform bitrix_sync.close_mapping(v_current.id, 'rebound', p_workflow_id);
  end if;
  perform bitrix_sync.open_mapping(v_wf.user_id, v_row.target_contact_id, p_workflow_id);
  update bitrix_sync.rebind_requests set status = 'succeeded', completed_at = now()
   where id = v_row.id
  returning * into v_row;
  perform bitrix_sync._resolve_conflict_alerts(v_wf.user_id);
  return v_row;
end $$;
comment on function bitrix_sync.complete_rebind(uuid, uuid) is
  'in_progress -> succeeded for the request of a contact.rebind workflow, in one call: closes the user''s active mapping (rebound), opens the link to the target Contact, and resolves the user''s open conflict alerts. Fenced by the workflow''s lease token (BS001); BS006 if the target is linked meanwhile.';
-- <<< sql/rebind.sql
-- >>> sql/snapshots.sql (included)
-- Contact snapshots (§6.4) and CRM-master writes into the App (§3.1, §5.5): what bitrix-sync last
-- wrote into or read from each linked Contact, as hashes, and the App profile update that goes with
-- a read. The profile write runs with han.sync_suppress so it never echoes back as an App intent.

create or replace function bitrix_sync.record_contact_created(
  p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text,
  p_citizenship_enum_id text
) returns bitrix_sync.contact_snapshots
language plpgsql as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  insert into bitrix_sync.contact_snapshots
    (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, registered,
     last_applied_source, last_applied_at, stale, stale_reason)
  values (p_contact_id, p_user_id, p_name_hash, p_email_hash, p_phone_hash, p_citizenship_enum_id, true,
          'app_create', now(), false, null)
  on conflict (contact_id) do update
    set user_id = excluded.user_id, name_hash = excluded.name_hash, email_hash = excluded.email_hash,
        phone_hash = excluded.phone_hash, citizenship_enum_id = excluded.citizenship_enum_id,
        registered = true, last_applied_source = 'app_create', last_applied_at = now(), stale = false,
        stale_reason = null
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.record_contact_created(text, uuid, text, text, text, text) is
  'Snapshot of what bitrix-sync wrote into a Contact it created (§5.1 step 9, source app_create): hashes only.';

create or replace function bitrix_sync.record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text)
returns bitrix_sync.contact_snapshots
language plpgsql as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  insert into bitrix_sync.contact_snapshots (contact_id, user_id, phone_hash)
  values (p_contact_id, p_user_id, p_phone_hash)
  on conflict (contact_id) do update set phone_hash = excluded.phone_hash, user_id = excluded.user_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.record_contact_phone(text, uuid, text) is
  'Notes the hash of the phone bitrix-sync last wrote into a Contact, so the next change overwrites that entry instead of adding one.';

create or replace function bitrix_sync.mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text)
returns bitrix_sync.contact_snapshots
language plpgsql as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  perform bitrix_sync._check_code(p_reason);
  insert into bitrix_sync.contact_snapshots (contact_id, user_id, stale, stale_reason)
  values (p_contact_id, p_user_id, true, p_reason)
  on conflict (contact_id) do update set stale = true, stale_reason = excluded.stale_reason
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.mark_contact_snapshot_stale(text, uuid, text) is
  'Marks the App''s copy of a Contact as possibly behind the CRM (e.g. contact_not_found) without clearing any App value.';

create or replace function bitrix_sync.apply_crm_master_fields(
  p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text,
  p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamptz,
  p_registered boolean, p_crm_created_at timestamptz, p_crm_updated_at timestamptz, p_source text,
  p_webhook_received_at timestamptz default null
) returns bitrix_sync.contact_snapshots
language plpgsql as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  if p_source is null or p_source not in ('app_create', 'webhook', 'reconciliation') then
    raise exception 'the source of CRM-master fields is app_create, webhook or reconciliation, not %', p_source
      using errcode = 'BS004', hint = 'Name the path that read the Contact.';
  end if;
  -- For the rest of the caller's transaction: the App's trigger records no intent for this write.
  perform set_config('han.sync_suppress', 'true', true);
  update han_app.client_profile
     set full_name = p_full_name, citizenship = p_citizenship, email = p_email,
         source_updated_at = coalesce(p_crm_updated_at, now())
   where user_id = p_user_id;
  insert into bitrix_sync.contact_snapshots
    (contact_id, user_id, name_hash, email_hash, citizenship_enum_id, citizenship_dictionary_loaded_at,
     registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at,
     last_webhook_received_at, stale, stale_reason)
  values (p_contact_id, p_user_id, p_name_hash, p_email_hash, p_citizenship_enum_id, p_dictionary_loaded_at,
          p_registered, p_crm_created_at, p_crm_updated_at, p_source, now(), p_webhook_received_at, false, null)
  on conflict (contact_id) do update
    set user_id = excluded.user_id, name_hash = excluded.name_hash, email_hash = excluded.email_hash,
        citizenship_enum_id = excluded.citizenship_enum_id,
        citizenship_dictionary_loaded_at = coalesce(excluded.citizenship_dictionary_loaded_at,
                                                    bitrix_sync.contact_snapshots.citizenship_dictionary_loaded_at),
        registered = excluded.registered, crm_created_at = excluded.crm_created_at,
        crm_updated_at = excluded.crm_updated_at, last_applied_source = excluded.last_applied_source,
        last_applied_at = now(),
        last_webhook_received_at = coalesce(excluded.last_webhook_received_at,
                                            bitrix_sync.contact_snapshots.last_webhook_received_at),
        stale = false, stale_reason = null
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.apply_crm_master_fields(uuid, text, text, text, text, text, text, text, timestamptz, boolean, timestamptz, timestamptz, text, timestamptz) is
  'Writes a Contact''s CRM-master fields (NAME, citizenship display value, picked email; null clears) into the App profile with han.sync_suppress set for the transaction, and records the snapshot (hashes, enum ID, CRM timestamps, source). The caller has checked the read is not older than the snapshot.';
-- <<< sql/snapshots.sql
-- >>> sql/reconciliation.sql (included)
-- Reconciliation runs (§10.2, §10.3): the cursor row of each job is its lock. A run is claimed when
-- it is due (the interval passed, or forced) and no other run holds the cursor; a run still marked
-- running after reconcile.lease_sec is taken to have died. The lease token fences the finish, and
-- the watermark moves only when a whole run succeeded.

create or replace function bitrix_sync.claim_reconciliation_cursor(
  p_job_type text, p_interval interval, p_force boolean default false, p_overlap interval default null
) returns setof bitrix_sync.reconciliation_cursors
language plpgsql as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
  v_lease interval := make_interval(secs => (bitrix_sync._active_setting('reconcile.lease_sec') #>> '{}')::double precision);
begin
  if p_interval is null or p_interval < interval '0' or p_overlap < interval '0' then
    raise exception 'a reconciliation claim needs a non-negative interval (and overlap)'
      using errcode = 'BS004', hint = 'Check reconcile.contacts_interval_sec, alerts.reconcile_interval_sec and reconcile.overlap_sec.';
  end if;
  insert into bitrix_sync.reconciliation_cursors (job_type) values (p_job_type) on conflict do nothing;
  select * into v_row from bitrix_sync.reconciliation_cursors where job_type = p_job_type for update skip locked;
  if not found then
    return; -- another claimer holds the row this instant
  end if;
  if v_row.last_run_status = 'running' and v_row.last_run_started_at >= now() - v_lease then
    return; -- a run is in progress
  end if;
  if not coalesce(p_force, false) and v_row.last_run_started_at > now() - p_interval then
    return; -- not due yet
  end if;
  update bitrix_sync.reconciliation_cursors
     set last_run_started_at = now(), last_run_status = 'running', lease_token = gen_random_uuid(),
         overlap = coalesce(p_overlap, overlap)
   where job_type = p_job_type
  returning * into v_row;
  return next v_row;
end $$;
comment on function bitrix_sync.claim_reconciliation_cursor(text, interval, boolean, interval) is
  'Starts a run of job p_job_type when it is due (last start at least p_interval ago, or p_force) and no live run holds the cursor (a running run older than reconcile.lease_sec is taken over). Returns the cursor with a new lease_token and last_run_started_at = now(), the next watermark; no row when nothing is to be run.';

create or replace function bitrix_sync.finish_reconciliation_run(
  p_job_type text, p_lease_token uuid, p_scanned integer, p_updated integer, p_recovered integer default null
) returns bitrix_sync.reconciliation_cursors
language plpgsql as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  update bitrix_sync.reconciliation_cursors
     set watermark = last_run_started_at, last_success_at = now(), last_run_status = 'succeeded',
         last_error_code = null, last_scanned = p_scanned, last_updated = p_updated,
         last_recovered = coalesce(p_recovered, last_recovered),
         -- Smoothed usual value of recovered Contacts, for the spike alert of §10.2.
         recovered_baseline = case when p_recovered is null then recovered_baseline
                                   else coalesce(recovered_baseline * 0.8 + p_recovered * 0.2, p_recovered) end,
         lease_token = null
   where job_type = p_job_type and last_run_status = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.finish_reconciliation_run(text, uuid, integer, integer, integer) is
  'running -> succeeded: the watermark moves to the run''s start, the counts are recorded (p_recovered also feeds the spike baseline). Refuses a run whose lease was taken over (BS001).';

create or replace function bitrix_sync.fail_reconciliation_run(p_job_type text, p_lease_token uuid, p_error_code text)
returns bitrix_sync.reconciliation_cursors
language plpgsql as $$
declare
  v_row bitrix_sync.reconciliation_cursors;
begin
  perform bitrix_sync._check_code(p_error_code);
  update bitrix_sync.reconciliation_cursors
     set last_run_status = 'failed', last_error_code = p_error_code, lease_token = null
   where job_type = p_job_type and last_run_status = 'running' and lease_token = p_lease_token
  returning * into v_row;
  if not found then
    perform bitrix_sync._refuse_stale('reconciliation run', p_job_type);
  end if;
  return v_row;
end $$;
comment on function bitrix_sync.fail_reconciliation_run(text, uuid, text) is
  'running -> failed with a safe code; the watermark stays, so the next run reads the same window again. Refuses a run whose lease was taken over (BS001).';
-- <<< sql/reconciliation.sql
-- >>> sql/status.sql (included)
-- Status views (§14): counts and ages only, never PII, Contact/user IDs or raw errors. Readable by
-- bitrix_sync_admin and used by GET /internal/sync/v1/status.

create or replace view bitrix_sync.status_queue as
select q.status, count(*)::bigint as count,
       extract(epoch from now() - min(q.created_at))::bigint as oldest_age_sec
  from han_app.sync_queue q
 group by q.status;
comment on view bitrix_sync.status_queue is 'han_app.sync_queue depth and oldest age by status.';

create or replace view bitrix_sync.status_workflows as
select w.workflow_type, w.state, count(*)::bigint as count,
       extract(epoch from now() - min(w.created_at))::bigint as oldest_age_sec
  from bitrix_sync.workflow_instances w
 where w.state not in ('succeeded', 'failed', 'cancelled')
 group by w.workflow_type, w.state;
comment on view bitrix_sync.status_workflows is 'Active workflows by type and state, with the oldest age.';

create or replace view bitrix_sync.status_commands as
select c.command_type, c.status, count(*)::bigint as count,
       extract(epoch from now() - min(c.created_at))::bigint as oldest_age_sec
  from bitrix_sync.crm_commands c
 where c.status not in ('succeeded')
 group by c.command_type, c.status;
comment on view bitrix_sync.status_commands is 'Unfinished and dead-lettered CRM commands by type and status.';

create or replace view bitrix_sync.status_webhooks as
select w.receiver, w.status, count(*)::bigint as count,
       extract(epoch from now() - min(w.received_at))::bigint as oldest_age_sec
  from bitrix_sync.webhook_inbox w
 where w.status not in ('processed')
 group by w.receiver, w.status;
comment on view bitrix_sync.status_webhooks is 'Unprocessed webhook inbox rows by receiver and status (webhook lag).';

create or replace view bitrix_sync.status_dead_letters as
select d.source, d.operation, d.error_code, count(*)::bigint as count,
       extract(epoch from now() - min(d.created_at))::bigint as oldest_age_sec
  from bitrix_sync.technical_dead_letters d
 where d.resolved_at is null
 group by d.source, d.operation, d.error_code;
comment on view bitrix_sync.status_dead_letters is 'Open technical dead letters by source, operation and safe code.';

create or replace view bitrix_sync.status_alerts as
select a.alert_type, a.severity, count(*)::bigint as open_count,
       count(*) filter (where a.first_occurred_at < now() - make_interval(hours =>
         (select (bitrix_sync._active_setting('alerts.sla_hours') #>> '{}')::integer)))::bigint as sla_overdue
  from bitrix_sync.business_alerts a
 where a.status = 'open'
 group by a.alert_type, a.severity;
comment on view bitrix_sync.status_alerts is 'Open business alerts by type and severity, with how many are past the SLA.';
-- <<< sql/status.sql
-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md). Everything is revoked from public first; each role gets only
-- what it calls. Re-runnable.

revoke all on schema bitrix_sync from public;
revoke all on all tables in schema bitrix_sync from public;
revoke all on all sequences in schema bitrix_sync from public;
revoke all on all functions in schema bitrix_sync from public;
revoke all on function han_app.enqueue_contact_sync() from public;
revoke all on han_app.sync_queue from public;

-- bitrix_sync_user: the runtime. Writes its own schema's rows (no DDL: the schema is owned by the
-- migration role), processes sync_queue, reads identity/profile, writes CRM-master profile columns.
grant usage on schema bitrix_sync to bitrix_sync_user;
grant select, insert, update on all tables in schema bitrix_sync to bitrix_sync_user;
grant delete on bitrix_sync.webhook_inbox, bitrix_sync.crm_commands to bitrix_sync_user;
grant usage, select on all sequences in schema bitrix_sync to bitrix_sync_user;
grant execute on all functions in schema bitrix_sync to bitrix_sync_user;
grant usage on schema han_app to bitrix_sync_user;
grant select (id, phone_number, record_status, created_at, updated_at) on han_app.user_identity to bitrix_sync_user;
grant select (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)
  on han_app.client_profile to bitrix_sync_user;
grant update (full_name, citizenship, email, source_updated_at) on han_app.client_profile to bitrix_sync_user;
grant select on han_app.sync_queue to bitrix_sync_user;
grant update (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code,
              last_error_at, completed_at, cancel_reason, updated_at)
  on han_app.sync_queue to bitrix_sync_user;
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

-- bitrix_sync_admin: the audited procedures and the status views, nothing else. The procedures are
-- security definer, so no table grant is needed for them.
grant usage on schema bitrix_sync to bitrix_sync_admin;
grant execute on function bitrix_sync.request_bitrix_contact_rebind(uuid, text, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.propose_settings(jsonb, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.validate_settings_version(integer) to bitrix_sync_admin;
grant execute on function bitrix_sync.activate_settings_version(integer, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.rollback_settings(integer, text, text) to bitrix_sync_admin;
grant execute on function bitrix_sync.active_settings() to bitrix_sync_admin;
-- status_alerts reads alerts.sla_hours through it; a view's caller needs EXECUTE on its functions.
grant execute on function bitrix_sync._active_setting(text) to bitrix_sync_admin;
grant select on bitrix_sync.status_queue, bitrix_sync.status_workflows, bitrix_sync.status_commands,
  bitrix_sync.status_webhooks, bitrix_sync.status_dead_letters, bitrix_sync.status_alerts,
  bitrix_sync.settings, bitrix_sync.settings_versions, bitrix_sync.state_edges to bitrix_sync_admin;

-- han_app_user: the App writes identity and profile; sync_queue rows appear through the security
-- definer trigger, so it needs no write grant there. It has nothing in schema bitrix_sync.
grant usage on schema han_app to han_app_user;
grant select, insert, update on han_app.user_identity, han_app.client_profile to han_app_user;
grant select on han_app.sync_queue to han_app_user;
revoke all on schema bitrix_sync from han_app_user;
-- <<< sql/grants.sql
