-- CRM commands (§7.2, §8): brought forward after a portal-wide failure, or released unsent under
-- the command's lease token.

create or replace function bitrix_sync.bring_forward_commands(p_codes text[], p_limit integer default null)
returns integer
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer;
  v_w integer := 0;
  v_l integer := 0;
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
  -- goes through the limiter. A wait for a late write that may still land (awaiting_late_write)
  -- keeps the moment its late execution settles (step_data.late_write_settles_at, written by the
  -- step: src/workflows/step/core.ts) and loses only the backoff beyond it, which the portal's
  -- failures had grown; a wait that does not say when it settles keeps its time.
  if p_limit is null then
    with picked as (
      select w.id from bitrix_sync.workflow_instances w
       where w.state = 'waiting_retry' and w.next_attempt_at > now() and w.last_error_code = any(p_codes)
       for update skip locked
    )
    update bitrix_sync.workflow_instances w set next_attempt_at = now()
      from picked where w.id = picked.id;
    get diagnostics v_w = row_count;
    with picked as (
      select w.id,
             case when (w.step_data ->> 'late_write_settles_at') ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$'
                  then greatest(now(), (w.step_data ->> 'late_write_settles_at')::timestamptz) end as settles
        from bitrix_sync.workflow_instances w
       where w.state = 'waiting_retry' and w.next_attempt_at > now()
         and w.last_error_code = 'awaiting_late_write'
       for update skip locked
    )
    update bitrix_sync.workflow_instances w set next_attempt_at = picked.settles
      from picked where w.id = picked.id and w.next_attempt_at > picked.settles;
    get diagnostics v_l = row_count;
    if v_w + v_l > 0 then
      perform pg_notify('bitrix_sync_workflows', '');
    end if;
  end if;
  return v_n + v_w + v_l;
end $$;
comment on function bitrix_sync.bring_forward_commands(text[], integer) is
  'Makes retry_wait commands whose last error is one of p_codes (failures of the whole portal: server errors, lost connections, limit refusals) due now, the earliest first, at most p_limit (null: all). With no limit, also makes waiting_retry workflows whose last error is one of p_codes due now (a command handed back to its workflow), and cuts the wait of awaiting_late_write workflows to the moment their late write settles (step_data.late_write_settles_at), never below. The pump calls it with one command as a probe while the portal fails, and with no limit when the portal answers again. Returns how many commands and workflows.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.bring_forward_commands(text[],integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump after a portal-wide failure).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

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
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.release_command(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
