-- A variant for BENCH_SETUP_SQL (npm run bench:engine, bench:peers): migration 000048 undone on a
-- database at 000048, so the two schemas can be run alternately in one session. It puts back the
-- CHECKs of workflow_instances (NOT VALID, as several were) and metric_events' CHECK on machine,
-- drops the _980_check_* triggers, and restores _check_code() and _trace_context() as 000032 and
-- 000028 wrote them. docs/performance.md, "Issue 36, third round".
set jit = off;
drop trigger if exists _980_check_workflow_type on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_workflow_type_check check (workflow_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])) not valid;
drop trigger if exists _980_check_intent_type on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_intent_type_check check (intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate,contact.rebind}'::text[])) not valid;
drop trigger if exists _980_check_state on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_state_check check (state::text = any ('{created,running,waiting_crm,waiting_retry,waiting_manual,succeeded,failed,cancelled}'::text[])) not valid;
drop trigger if exists _980_check_finished on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_finished check ((state::text = any ('{succeeded,failed,cancelled}'::text[])) = (finished_at is not null)) not valid;
drop trigger if exists _980_check_lease on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_lease check ((lease_token is null) = (locked_until is null)) not valid;
drop trigger if exists _980_check_held_intent on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_held_intent check (held_intent_type is null or held_intent_type::text = any ('{contact.map_or_create,contact.update,contact.deactivate}'::text[])) not valid;
drop trigger if exists _980_check_attempt_count on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_attempt_count_check check (attempt_count >= 0) not valid;
drop trigger if exists _980_check_revision on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_revision_check check (revision >= 1) not valid;
drop trigger if exists _980_check_processed_revision on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_processed_revision_check check (processed_revision >= 0) not valid;
drop trigger if exists _980_check_trace_context on bitrix_sync.workflow_instances;
alter table bitrix_sync.workflow_instances add constraint workflow_instances_trace_context_chk check (trace_context ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') not valid;
create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  if p_code is null or p_code !~ '^[a-z0-9][a-z0-9_.]{0,63}$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
create or replace function bitrix_sync._trace_context(p_traceparent text) returns text
language sql immutable parallel safe as $$
  select case
    when p_traceparent operator(pg_catalog.~) '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
         and pg_catalog.substr(p_traceparent, 4, 32) operator(pg_catalog.<>) pg_catalog.repeat('0', 32)
         and pg_catalog.substr(p_traceparent, 37, 16) operator(pg_catalog.<>) pg_catalog.repeat('0', 16)
    then p_traceparent
  end
$$;
alter table bitrix_sync.metric_events add constraint metric_events_machine_check check (machine::text = ANY (ARRAY['workflow'::character varying, 'command'::character varying, 'webhook'::character varying, 'dead_letter'::character varying, 'alert'::character varying]::text[]));
