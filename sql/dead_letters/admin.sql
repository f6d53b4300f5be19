-- Technical dead letters an admin can act on (§9, issue 11; recipes in docs/admin.md). Each function
-- is security definer with a pinned search_path, runs as bitrix_sync_admin only, records who and why
-- on the dead letter itself and in admin_actions in the same transaction, and refuses with a
-- SQLSTATE, a sentence and a HINT that says what to do instead:
--   list_dead_letters        what is open (or everything), with what a requeue would do or why not;
--   acknowledge_dead_letter  looked at, nothing re-sent: the entry leaves the open-DLQ gauge;
--   requeue_dead_letter      a new, fenced attempt through the normal state machine
--                            (sql/dead_letters/requeue_rules.sql).

create or replace function bitrix_sync.list_dead_letters(p_include_resolved boolean default false, p_limit integer default 100)
returns table (
  id bigint, source text, operation text, error_code text, http_status integer, bitrix_error text,
  attempt_count integer, first_attempt_at timestamptz, deadline_at timestamptz, created_at timestamptz,
  age_sec bigint, source_id text, workflow_id uuid, command_id bigint, workflow_type text, workflow_state text,
  requeue text, resolution text, resolved_at timestamptz, resolved_by text, requeued_to text,
  resolved_db_user text
)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_limit is null or p_limit not between 1 and 10000 then
    raise exception 'the limit must be between 1 and 10000, got %', p_limit
      using errcode = 'BS004', hint = 'Example: select * from bitrix_sync.list_dead_letters(false, 500);';
  end if;
  return query
  select d.id, d.source::text, d.operation::text, d.error_code::text, d.http_status, d.bitrix_error::text,
         d.attempt_count, d.first_attempt_at, d.deadline_at, d.created_at,
         extract(epoch from now() - d.created_at)::bigint, d.source_id::text, d.workflow_id, d.command_id,
         w.workflow_type::text, w.state::text,
         case when d.resolved_at is not null then null
              when r.why is null then 'ready'
              else (r.why ->> 'code') || ': ' || (r.why ->> 'message') end,
         d.resolution::text, d.resolved_at, d.resolved_by::text, d.requeued_to::text, d.resolved_db_user::text
    from bitrix_sync.technical_dead_letters d
    left join bitrix_sync.workflow_instances w on w.id = d.workflow_id
    left join lateral (select bitrix_sync._requeue_refusal(d) as why) r on d.resolved_at is null
   where d.id in (select x.id from bitrix_sync.technical_dead_letters x
                   where p_include_resolved or x.resolved_at is null
                   order by x.id desc
                   limit p_limit)
   order by d.id;
end $$;
comment on function bitrix_sync.list_dead_letters(boolean, integer) is
  'Admin (§9): the newest p_limit technical dead letters, open ones only unless p_include_resolved, oldest first, with safe columns (codes, counts, times, internal ids, who resolved it: the declared operator and the login; the reasons are in admin_actions), the state of their workflow, and `requeue`: ready, or the SQLSTATE and sentence a requeue would refuse with now.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.list_dead_letters(boolean,integer)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: what is open, and what a requeue would do (docs/admin.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._resolve_dead_letters(
  p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text
) returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language sql set search_path = pg_catalog, pg_temp as $$
  with resolved as (
    update bitrix_sync.technical_dead_letters d
       set resolved_at = now(), resolved_by = btrim(p_operator), resolved_db_user = session_user,
           resolution = p_resolution, resolution_reason = btrim(p_reason), requeued_to = p_target
     where d.id = any(p_ids) and d.resolved_at is null
    returning d.*
  ), audit as (
    -- One audit row per entry, with the admin functions' others (docs/admin.md).
    insert into bitrix_sync.admin_actions (action, workflow_id, dead_letter_id, reason, operator_id)
    select case p_resolution when 'requeued' then 'requeue_dead_letter' else 'acknowledge_dead_letter' end,
           r.workflow_id, r.id, btrim(p_reason), btrim(p_operator)
      from resolved r
  )
  select r.id, r.source::text, r.operation::text, r.resolution::text, r.requeued_to::text, r.resolved_at,
         r.resolved_by::text
    from resolved r
   order by r.id
$$;
comment on function bitrix_sync._resolve_dead_letters(bigint[], text, text, text, text) is
  'Internal: marks open dead letters resolved with the resolution, operator, login (session_user), reason and (requeued) target, and writes an admin_actions row for each; returns them.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._resolve_dead_letters(bigint[],text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text)
returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_dl bitrix_sync.technical_dead_letters;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  return query select * from bitrix_sync._resolve_dead_letters(array[v_dl.id], 'acknowledged', p_operator, p_reason, null);
end $$;
comment on function bitrix_sync.acknowledge_dead_letter(bigint, text, text) is
  'Admin (§9): an open technical dead letter was looked at and nothing is sent again. Writes resolved_at, resolved_by, resolution = acknowledged and the reason; the entry leaves status_dead_letters and the open-DLQ gauge. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.acknowledge_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: resolved without a new attempt, audited.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text)
returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_dl bitrix_sync.technical_dead_letters;
  v_refusal jsonb;
  v_target text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  -- Lock what the new attempt starts from, so the checks below hold until commit.
  if v_dl.workflow_id is not null then
    perform 1 from bitrix_sync.workflow_instances w where w.id = v_dl.workflow_id for update;
  elsif v_dl.source = 'crm_command' then
    perform 1 from bitrix_sync.business_alerts a
     where a.id = (select c.alert_id from bitrix_sync.crm_commands c where c.id = v_dl.command_id)
       for update;
  end if;
  v_refusal := bitrix_sync._requeue_refusal(v_dl);
  if v_refusal ->> 'code' = 'BS042' then
    raise exception 'technical dead letter % cannot be requeued: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS042', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  elsif v_refusal is not null then
    raise exception 'technical dead letter % cannot be requeued yet: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS043', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  end if;
  begin
    v_target := bitrix_sync._requeue_target(v_dl);
  exception when unique_violation then
    -- A new intent or workflow of the user arrived between the check and the insert.
    raise exception 'technical dead letter % cannot be requeued: the user has new work under way', p_id
      using errcode = 'BS043', hint = 'Wait until it finishes (bitrix_sync.status_workflows), then look again with list_dead_letters().';
  end;
  return query select * from bitrix_sync._resolve_dead_letters(
    bitrix_sync._covered_dead_letters(v_dl), 'requeued', p_operator, p_reason, v_target);
end $$;
comment on function bitrix_sync.requeue_dead_letter(bigint, text, text) is
  'Admin (§9): starts a new, fenced attempt of what an open technical dead letter gave up on, through the normal state machine (a new intent or inbox row, the failed workflow from its first step, or the alert''s mirror), with a retry horizon counted from now; marks it (and the open entries the same attempt answers) resolved as requeued with operator and reason. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved, BS042 nothing to run again, BS043 something else of the same user or alert is running.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.requeue_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: a new attempt through the normal state machine, audited.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
