-- The engine as the runbook looks after it (docs/runbook.md), as bitrix_sync_admin: graphile-worker's
-- crontab and jobs without payloads or error texts, and ANALYZE of the busiest tables after a large
-- backlog. Security definer: the admin has no right on graphile-worker's schema or the tables.

create or replace function bitrix_sync.crontab_runs()
returns table (identifier text, last_execution timestamptz)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select k.identifier::text, k.last_execution
    from graphile_worker._private_known_crontabs k
   order by k.identifier;
$$;
comment on function bitrix_sync.crontab_runs() is
  'Admin (docs/runbook.md, BitrixSyncReconciliationLagging): when each crontab entry of the service last fired (graphile-worker''s known crontabs); a stale one means no process runs the worker''s cron.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.crontab_runs()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Runbook: when each crontab entry last fired.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.worker_jobs()
returns table (id bigint, task_identifier text, run_at timestamptz, attempts smallint, max_attempts smallint,
               failed boolean, locked_by text, locked_at timestamptz, key text)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  -- graphile-worker's public view; its payloads and error texts stay out.
  return query
  select j.id, j.task_identifier::text, j.run_at, j.attempts, j.max_attempts, j.last_error is not null,
         j.locked_by::text, j.locked_at, j.key::text
    from graphile_worker.jobs j
   where j.task_identifier in ('sync_loop', 'reconcile_contacts', 'reconcile_alerts', 'retention', 'audit_convergence')
   order by j.run_at;
end $$;
comment on function bitrix_sync.worker_jobs() is
  'Admin: the service''s graphile-worker jobs (sync_loop, reconciliations, retention, audit_convergence) with when they run, attempts, whether the last one failed, and who holds them; no payload, no error text.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.worker_jobs()', array[]::text[], array['EXECUTE'], array[]::text[],
   'The service''s graphile-worker jobs without payloads or error texts (docs/runbook.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.analyze_engine_tables() returns void
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  analyze bitrix_sync.workflow_instances, bitrix_sync.crm_commands, han_app.sync_queue;
end $$;
comment on function bitrix_sync.analyze_engine_tables() is
  'Admin: ANALYZE of the engine''s busiest tables (workflow_instances, crm_commands, sync_queue) after a large backlog appeared, so the planner sees the live rows (docs/runbook.md, BitrixSyncLagOverSla).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.analyze_engine_tables()', array[]::text[], array['EXECUTE'], array[]::text[],
   'ANALYZE of the engine''s busiest tables after a large backlog (docs/runbook.md).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
