-- Retention and the convergence audit at scale (docs/performance.md, "Scale"). bench:scale measured
-- both growing with the installation, 10 000 -> 1 M users: a workflow retention batch 141 ms ->
-- 21.5 s, the audit's claim 56 ms -> 3.4 s and its sample 98 ms -> 12.9 s. Neither is on the sync
-- path; both ran hourly and would have outgrown retention.run_budget_sec and the audit's lease at
-- 10 M users.
--
-- 1. Workflow retention sweeps instead of searching (sql/retention.sql). Most finished workflows
--    past retention are kept for good (a link's workflow, each user's newest) and are the oldest, so
--    each batch walked all of them before the first it could delete. A batch is now one window of
--    at most 20 x retention.batch_size workflows after the place the last one stopped at
--    (retention_sweeps, below); past the newest the sweep starts a new round. retention_step(table)
--    says whether to call again; delete_retention_batch(table) stays, and for workflows deletes one
--    window's rows (the previous release's task stops at a window with nothing to delete; the next
--    run goes on from the place).
-- 2. The audit finds the links it compares next, and those overdue, from the oldest mark on
--    (sql/convergence_audit.sql). Every active link now has a mark from the moment it opens
--    (audited_at = opened_at until compared: the ordering the audit always used), kept by a trigger
--    on entity_external_mapping that also drops the mark of a link that closes (finish_audit_run
--    did that by reading every mark). Links and overdue links are no longer counted over every
--    link: the active links come from _active_link_count() (exact below 100 000, the planner's
--    count above), the overdue ones from the index. status_audit.last_links now counts every active
--    link, an inactive user's too (those are inactive_user_linked findings).
--
-- Locks and time: the marks of active links that have none are added here (one row per link never
-- compared; a few seconds per million), and the index is built under SHARE on audit_marks, which
-- only the audit writes; entity_external_mapping gets a trigger (a brief SHARE ROW EXCLUSIVE).
-- Nothing here touches the App's tables or the sync path's rows.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table if not exists bitrix_sync.retention_sweeps (
  table_name text primary key check (table_name in ('workflows')),
  after_finished_at timestamptz,
  after_id uuid,
  round_started_at timestamptz not null default now(),
  last_round_ended_at timestamptz,
  updated_at timestamptz not null default now(),
  check ((after_finished_at is null) = (after_id is null))
);
comment on table bitrix_sync.retention_sweeps is
  'Where a retention sweep stands (one row per swept table; workflows only): the next window starts after (after_finished_at, after_id), from the oldest when null. Written by _retention_sweep_workflows() only.';
comment on column bitrix_sync.retention_sweeps.table_name is 'The table swept: workflows.';
comment on column bitrix_sync.retention_sweeps.after_finished_at is 'finished_at of the last workflow the sweep examined or deleted this round; null: the round starts from the oldest.';
comment on column bitrix_sync.retention_sweeps.after_id is 'id of that workflow (ties of finished_at are ordered by id).';
comment on column bitrix_sync.retention_sweeps.round_started_at is 'When the current round started.';
comment on column bitrix_sync.retention_sweeps.last_round_ended_at is 'When the last round went past the newest finished workflow past retention; null before the first.';
comment on column bitrix_sync.retention_sweeps.updated_at is 'When a window last moved the place.';
insert into bitrix_sync.retention_sweeps (table_name) values ('workflows') on conflict (table_name) do nothing;

-- Marks for the active links that have none (never compared); marks of links no longer active go.
insert into bitrix_sync.audit_marks (mapping_id, user_id, audited_at)
select m.id, m.entity_id, m.opened_at
  from bitrix_sync.entity_external_mapping m
 where m.status = 'active'
on conflict (mapping_id) do nothing;
delete from bitrix_sync.audit_marks k
 where not exists (select 1 from bitrix_sync.entity_external_mapping m where m.id = k.mapping_id and m.status = 'active');
comment on table bitrix_sync.audit_marks is
  'One row per active link (entity_external_mapping.id): when the convergence audit last compared it with its Contact, or when it was opened while never compared. Added and dropped with the link by a trigger on entity_external_mapping; moved on by record_audit_findings.';
comment on column bitrix_sync.audit_marks.audited_at is 'When the run that last compared the link read the Contact; the link''s opened_at while it was never compared.';

-- squawk-ignore require-concurrent-index-creation
create index if not exists audit_marks_due_idx on bitrix_sync.audit_marks (audited_at, mapping_id);
comment on index bitrix_sync.audit_marks_due_idx is
  'The convergence audit''s order: least recently compared first (audit_sample), and the overdue ones (claim_audit_run, finish_audit_run).';

-- #include sql/retention.sql
-- #include sql/convergence_audit.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
