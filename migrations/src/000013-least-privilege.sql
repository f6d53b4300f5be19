-- Production safety, the database half (issue 10): nothing is claimed before the cutover (the gate
-- is in the claim functions, sql/cutover.sql); the cutover and the other admin functions are the
-- admin role's; the runtime role executes an explicit list of functions and writes only the
-- columns they write, from one privilege catalogue (sql/privileges.sql, applied by sql/grants.sql);
-- rows are born in their initial state and identity and audit columns never change
-- (sql/row_guards.sql); every setting has bounds and integers are stored as int4 prints them; one
-- event's or one receiver's failure no longer fails a receivers' call; one open rebind request per
-- target Contact.
set local lock_timeout = '10s';

-- 000012-trace-context was released before the migrations from here to 000017, which were
-- written against the functions without trace contexts: its new signatures are dropped here and
-- 000018-trace-context-privileges creates them again, with their privileges. Its columns and CHECKs
-- stay (000018 keeps them: add column if not exists); a running service of that release calls these
-- functions, so it is stopped before this migration, as for any other.
drop function if exists bitrix_sync.start_or_join_workflow(uuid, text, uuid, text, text);
drop function if exists bitrix_sync.issue_command(uuid, uuid, text, jsonb, text, text);
drop function if exists bitrix_sync.accept_webhooks(text[], integer[], text[], inet[], text[]);
drop function if exists bitrix_sync._trace_context(text);

-- #include sql/roles.sql

-- Text settings get a maximum length; json settings the length of each entry.
alter table bitrix_sync.settings add column if not exists max_length integer;
alter table bitrix_sync.settings drop constraint if exists settings_max_length_check;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.settings add constraint settings_max_length_check
  check (max_length is null or max_length between 1 and 10000);
comment on column bitrix_sync.settings.max_length is
  'text: the longest value allowed; json: the longest value of each entry (its keys are allowed_values).';

-- #include sql/settings.sql

-- Every key has bounds; integers within int4, so every reader can cast them. The catalogue is a
-- few dozen rows and sql/settings.sql just wrote every one of them, so validating at once is quick.
alter table bitrix_sync.settings drop constraint if exists settings_bounded;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.settings add constraint settings_bounded check (
  case value_type
    when 'integer' then min_value is not null and max_value is not null and min_value <= max_value
                        and min_value = trunc(min_value) and max_value = trunc(max_value)
                        and min_value >= -2147483648 and max_value <= 2147483647
    when 'number' then min_value is not null and max_value is not null and min_value <= max_value
    when 'text' then max_length is not null
    when 'enum' then allowed_values is not null
    when 'json' then allowed_values is not null and max_length is not null
    else true
  end);

-- The active version may hold 1036.0 for an integer key (stored as written before this
-- migration). Its values are history, so a normalised copy is proposed and, when it validates,
-- activated; when it does not, the active version stays and readiness reports the problem.
do $$
declare
  v_active bitrix_sync.settings_versions;
  v_version integer;
begin
  select * into v_active from bitrix_sync.settings_versions where status = 'active';
  -- Compared as text: jsonb equality already takes 1036.0 for 1036.
  if found and v_active.settings_values::text <> bitrix_sync._normalise_settings(v_active.settings_values)::text then
    v_version := bitrix_sync.propose_settings('{}'::jsonb, 'migration', 'integer settings stored as int4 (000013)');
    if jsonb_array_length(bitrix_sync.validate_settings_version(v_version)) = 0 then
      perform bitrix_sync.activate_settings_version(v_version, 'migration');
    end if;
  end if;
end $$;

-- One open rebind request per target Contact (§5.4). Two open requests for one target can only
-- come from before this migration; a person decides which one goes on.
do $$
begin
  if exists (select 1 from bitrix_sync.rebind_requests r
              where r.status in ('requested', 'in_progress')
              group by r.target_contact_id having count(*) > 1) then
    raise exception 'two or more open rebind requests name the same target Contact'
      using errcode = 'BS093',
            hint = 'Find them with: select target_contact_id, id, status from bitrix_sync.rebind_requests where status in (''requested'', ''in_progress'') order by 1; let one finish, then run the migration again.';
  end if;
end $$;
-- rebind_requests is an audit table of a few rows per operator action: building the index inside
-- this transaction blocks nobody for long, and lock_timeout above bounds the wait for the lock.
-- squawk-ignore require-concurrent-index-creation
create unique index if not exists rebind_requests_one_open_per_target_uq
  on bitrix_sync.rebind_requests (target_contact_id) where status in ('requested', 'in_progress');
comment on index bitrix_sync.rebind_requests_one_open_per_target_uq is
  'A Contact is the target of at most one open rebind request (request_bitrix_contact_rebind raises BS009).';

-- #include sql/state_machines.sql
-- #include sql/cutover.sql
-- #include sql/queue.sql
-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/webhooks.sql
-- #include sql/reconciliation.sql
-- #include sql/rebind.sql
-- #include sql/receiver.sql
-- #include sql/limiter.sql
-- #include sql/row_guards.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
