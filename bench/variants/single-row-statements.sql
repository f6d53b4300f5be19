-- The single-row statements of docs/performance.md, "Issue 36, third round", in one backend:
--   createdb ... && MIGRATION_DATABASE_URL=<it> npm run db:migrate
--   psql -d <it> -f bench/variants/single-row-statements.sql
-- and again on a second one with bench/variants/before-000048.sql applied first, alternately.
-- Each DO block runs 10 000 statements of one row; \timing prints the block's time (divide by
-- 10 000 for µs per statement). It seeds 10 000 workflows (triggers off for the seed only) and
-- leaves them behind: use a database made for it.
set jit = off;
alter table bitrix_sync.workflow_instances disable trigger user;
insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, state) select 'contact.update','contact.update', gen_random_uuid(), 'waiting_retry' from generate_series(1,10000);
alter table bitrix_sync.workflow_instances enable trigger user;
create table if not exists public.ids2 as select id from bitrix_sync.workflow_instances;
vacuum analyze bitrix_sync.workflow_instances;
\timing on
do $$ declare v uuid; begin for v in select id from ids2 loop update bitrix_sync.workflow_instances set lease_token = gen_random_uuid(), locked_until = now(), locked_by = 'x', attempt_count = attempt_count + 1, updated_at = now() where id = v; end loop; end $$;
do $$ declare v uuid; begin for v in select id from ids2 loop update bitrix_sync.workflow_instances set lease_token = null, locked_until = null, locked_by = null, step_data = '{"a":1}', updated_at = now() where id = v; end loop; end $$;
do $$ declare v uuid; begin for v in select id from ids2 loop update bitrix_sync.workflow_instances set state = 'running', updated_at = now() where id = v; end loop; end $$;
do $$ declare v uuid; begin for v in select id from ids2 loop update bitrix_sync.workflow_instances set state = 'waiting_retry', updated_at = now() where id = v; end loop; end $$;
begin;
do $$ declare v uuid; begin for v in select id from ids2 loop insert into bitrix_sync.crm_commands (workflow_id, command_type, params, revision, correlation_id, trace_context) values (v, 'contact.read', '{"id":"1"}', 1, gen_random_uuid(), bitrix_sync._trace_context('00-0123456789abcdef0123456789abcdef-0123456789abcdef-01')); end loop; end $$;
rollback;
begin;
do $$ begin for i in 1..10000 loop insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, trace_context) values ('contact.update','contact.update', gen_random_uuid(), bitrix_sync._trace_context('00-0123456789abcdef0123456789abcdef-0123456789abcdef-01')); end loop; end $$;
rollback;
vacuum bitrix_sync.workflow_instances;
