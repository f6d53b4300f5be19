-- Pause and resume without a restart, and the deployment's view of the portal (§17, §14; issue 32).
--
-- 1. bitrix_sync.sync_pauses: one row per pause, who paused and why, who resumed and why
--    (sql/status/pause.sql writes it: pause_sync, resume_sync; the gate: sql/pause/gate.sql). While a row is open (resumed_at null) every
--    claim function returns nothing, as before the cutover: intents, workflows, commands, webhooks,
--    reconciliation runs and the convergence audit stop being taken on every replica, CLI worker or
--    psql session; the receivers and the App's journal keep recording. At most one open pause.
-- 2. The retry horizon (sql/retry/deadline.sql, _retry_deadline) no longer counts paused time: a row's horizon
--    is its first attempt + retry.horizon_sec + the paused time since that first attempt. So a pause
--    longer than the horizon resumes without dead letters. No row is rewritten: the deadline is
--    computed where every retry function already computes it.
-- 3. The claim gate: the claim functions (claim_sync_tasks, claim_workflows, claim_commands,
--    due_commands, claim_webhooks, claim_reconciliation_cursor, claim_audit_run) and the audit's
--    enabled gauge test sync_paused() beside cutover_performed(). One line each.
-- 4. crm_rate_buckets.last_answered_at: when the portal last answered any replica (HTTP 2xx),
--    written by the new overload release_crm_request(uuid, text, boolean) in the release each request
--    already makes, at most once a second (sql/limiter/acquire.sql, sql/limiter/health.sql). Readiness reads it: a replica that
--    was idle during an outage is ready again as soon as any replica reaches the portal.
--
-- Expand only: a new table, a nullable column, new functions and a new overload; the release before
-- keeps calling release_crm_request(uuid), which stays. Its claim functions are replaced by this
-- migration, so a pause also holds its replicas during a rolling upgrade.
--
-- Locks and time: a new empty table; ADD COLUMN without a default on crm_rate_buckets (one row per
-- portal; a brief ACCESS EXCLUSIVE); function replacements.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

create table if not exists bitrix_sync.sync_pauses (
  id bigint generated always as identity primary key,
  paused_at timestamptz not null default now(),
  paused_by varchar(128) not null check (length(btrim(paused_by)) > 0),
  paused_db_user varchar(128) default session_user,
  pause_reason text not null check (length(btrim(pause_reason)) between 3 and 500),
  resumed_at timestamptz,
  resumed_by varchar(128) check (resumed_by is null or length(btrim(resumed_by)) > 0),
  resumed_db_user varchar(128),
  resume_reason text check (resume_reason is null or length(btrim(resume_reason)) between 3 and 500),
  constraint sync_pauses_resumed check (
    (resumed_at is null) = (resumed_by is null)
    and (resumed_at is null) = (resume_reason is null)
    and (resumed_at is null or resumed_at >= paused_at))
);
comment on table bitrix_sync.sync_pauses is
  'Pauses of processing (§17 rollback), one row each: while a row is open (resumed_at null) no claim function returns work, and the retry horizon does not count the time. Written by pause_sync() and resume_sync(); never deleted.';
comment on column bitrix_sync.sync_pauses.id is 'The pause; resume_sync() names it to confirm which pause it ends.';
comment on column bitrix_sync.sync_pauses.paused_at is 'When processing was paused.';
comment on column bitrix_sync.sync_pauses.paused_by is 'Who paused, as the operator declared it (e.g. ops:ivanov).';
comment on column bitrix_sync.sync_pauses.paused_db_user is 'The database login that paused (session_user).';
comment on column bitrix_sync.sync_pauses.pause_reason is 'Why, in the operator''s words (no personal data).';
comment on column bitrix_sync.sync_pauses.resumed_at is 'When processing resumed; null while the pause holds.';
comment on column bitrix_sync.sync_pauses.resumed_by is 'Who resumed, as the operator declared it.';
comment on column bitrix_sync.sync_pauses.resumed_db_user is 'The database login that resumed (session_user).';
comment on column bitrix_sync.sync_pauses.resume_reason is 'Why processing may go on, in the operator''s words.';
create unique index if not exists sync_pauses_one_open_uq on bitrix_sync.sync_pauses ((true)) where resumed_at is null;
comment on index bitrix_sync.sync_pauses_one_open_uq is 'At most one open pause; also the index the claim gate (sync_paused()) reads.';

alter table bitrix_sync.crm_rate_buckets add column if not exists last_answered_at timestamptz;
comment on column bitrix_sync.crm_rate_buckets.last_answered_at is
  'When the portal last answered a request of any replica with HTTP 2xx (to the second: written at most once a second, by release_crm_request(uuid, true)). Readiness''s crm_stale judges the deployment by it.';

-- #include sql/pause/gate.sql
-- #include sql/pause/tables.sql
-- #include sql/retry/deadline.sql
-- #include sql/limiter/acquire.sql
-- #include sql/limiter/health.sql
-- #include sql/queue/lease.sql
-- #include sql/workflows/lease.sql
-- #include sql/commands/claim.sql
-- #include sql/webhooks/inbox.sql
-- #include sql/reconciliation/cursors.sql
-- #include sql/audit/run.sql
-- #include sql/audit/status.sql
-- #include sql/status/pause.sql
select bitrix_sync.apply_privileges();
