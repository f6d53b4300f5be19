-- Security hardening (docs/security.md): four findings of a review of the three roles.
--
-- 1. search_path. Every function and trigger function of bitrix_sync and han_app now runs with
--    search_path = pg_catalog, pg_temp, written in its definition in sql/ (a later migration that
--    includes the file keeps it; CREATE OR REPLACE without the SET clause would drop it). Before, 107
--    of 136 ran with the caller's path: where another role may create objects in a schema on that
--    path (public on databases created before PostgreSQL 15 and on several managed services), it
--    could plant an operator such as =(varchar, text) that matches the functions' varchar comparisons
--    better than the built-in one, and it then ran as bitrix_sync_user inside e.g.
--    active_mapping_for_contact() (test/integration/function-search-path.test.ts). The migration
--    itself runs with the same path, so the views, trigger WHEN clauses and SQL bodies it creates
--    are parsed without anything a planted object could offer.
--    Two SQL functions stay unpinned: PostgreSQL never inlines a SQL function with a SET clause, and
--    these are inlined on hot paths. Measured in one backend (npm run bench:search-path, backend CPU
--    per call, median of 3 passes; two runs, at load 8 and 14 on 2 cores), unpinned -> pinned:
--      _retry_deadline(timestamptz), the deadline_at default of every workflow and command insert:
--        70.5 -> 90.0 and 65.8 -> 95.8 µs per workflow insert;
--      _trace_context(text), once per event in accept_webhooks(): 57.5 -> 77.5 and 100 -> 137.5 µs
--        per event.
--    Their bodies name every operator OPERATOR(pg_catalog.x) and every function and type with its
--    schema. The other SQL functions cost nothing measurable pinned (alerts_to_look_up,
--    blocked_crm_methods, active_mapping_for_contact, cutover_performed within the noise) or a few
--    microseconds off the hot path (_workflow_first_attempt, _command_first_attempt: 2 µs a retry;
--    _is_write_command: 2 µs), and are pinned. _retention_cutoff() is pinned and its callers read it
--    once per statement (a scalar subquery) instead of once per row.
--    The drop function lines that only served earlier migrations' signature changes are gone from
--    sql/ (they stay in the committed migrations that needed them).
--
-- 2. han.sync_suppress. Any session can set it, so han_app.enqueue_contact_sync() honours it only
--    when the session acts as bitrix_sync_user or a member of it (the SET ROLE role, else the login
--    role; superusers are members of every role). An App session that sets it, or leaves it on a
--    pooled connection, records its intents as ever (docs/workflows.md, deviations).
--
-- 3. Locks no other role can take. The intake's fold (and so every claim, which waits for it) and
--    the intake watch (which decides whether an App commit NOTIFYs) waited on advisory locks
--    727014/1..3, the cutover, the metrics fold and the webhook claim on advisory keys too: any role
--    that can connect may take advisory locks, so it could stall App->CRM intake or make every App
--    commit NOTIFY (serialising the App's commits). Now they are table locks on three tables without
--    rows or columns that only the owner may lock (LOCK TABLE needs rights on the table; nobody is
--    granted any), taken by security definer functions: the fold and the cutover SHARE UPDATE
--    EXCLUSIVE on lock_intake_fold, the metrics fold on lock_metrics_fold, the App's trigger ROW
--    EXCLUSIVE NOWAIT on lock_intake_watch (it NOTIFYs when that fails), and a sleeping loop SHARE
--    on it (SHARE UPDATE EXCLUSIVE: one sleeper), asked for without queueing, every 5 ms for up to
--    1 s. What a role without rights can still get on any table by its oid is ACCESS SHARE, ROW
--    EXCLUSIVE (kept to the end of its transaction: a failing nextval() on the table) and a wait for
--    SHARE UPDATE EXCLUSIVE (brin_summarize_range()); none of them blocks the fold, the App or the
--    metrics fold, and none makes an App commit NOTIFY. ROW EXCLUSIVE does keep a loop from
--    watching: it then polls, its fallback. The webhook claim takes the entities of a batch in
--    (receiver, entity ID) order instead of an advisory lock per entity: a claimer that meets
--    another's uncommitted claim of an entity waits for it and skips the entity, with no cycle.
--    Weighed and not taken: a row lock for the watch (FOR KEY SHARE by each App transaction, FOR
--    UPDATE by the loop) would be out of every other role's reach too, but it writes the row (WAL)
--    and creates a multixact for every App transaction that overlaps another, on the App's write
--    path, and the loop would hold a transaction ID while it sleeps. The table locks write nothing,
--    take no transaction ID and keep no snapshot; the watching transaction, open while the loop
--    sleeps (at most worker.poll_interval_ms), lives on a connection of its own (a LISTEN connection
--    gets no notification inside a transaction) with idle_in_transaction_session_timeout 30 s. What
--    it costs the App (the NOWAIT try is a subtransaction): docs/performance.md, "Fourth look: the
--    watch without advisory locks".
--    During a rolling deployment a loop of the previous release calls watch_intake() outside a
--    transaction, so it holds nothing afterwards: the App's intents send it no NOTIFY and it finds
--    them at its fallback poll until it is replaced; unwatch_intake() is gone (that loop ignores the
--    error).
--
-- 4. Security definer functions that trusted what the caller handed them. The one found:
--    _close_rebind_request(workflow_instances), executable by bitrix_sync_user, closed a rebind
--    request from a row the caller could build (any state, any failure_code text). It now takes the
--    workflow's id, re-reads the row under its lock, refuses a workflow that has not finished (BS002)
--    or is no rebind (BS005), runs as the owner through its only caller, the trigger function
--    tg_workflow_instances__close_rebind_request() (now security definer), and is granted to nobody.
--    Every other security definer function takes ids, lease tokens and validated values only.
set local lock_timeout = '10s';
-- The definitions below are parsed with the path the functions run with (1.).
set local search_path = pg_catalog, pg_temp;

-- 3. The tables whose locks replace the advisory locks (sql/enqueue.sql, sql/cutover.sql,
--    sql/metrics.sql). No rows and no columns: only the lock on each table is used, taken by the
--    owner's security definer functions; nobody is granted anything on them.
create table if not exists bitrix_sync.lock_intake_watch ();
comment on table bitrix_sync.lock_intake_watch is
  'The intake watch, a lock only: a sleeping sync loop holds SHARE on it (watch_intake(), in a transaction it ends when it wakes); han_app.enqueue_contact_sync() tries ROW EXCLUSIVE NOWAIT for each App transaction that records an intent and NOTIFYs when that fails. No rows; no role but the owner may lock it.';
create table if not exists bitrix_sync.lock_intake_fold ();
comment on table bitrix_sync.lock_intake_fold is
  'One intake fold at a time, a lock only: fold_intent_journal() and perform_cutover() take SHARE UPDATE EXCLUSIVE on it. No rows; no role but the owner may lock it.';
create table if not exists bitrix_sync.lock_metrics_fold ();
comment on table bitrix_sync.lock_metrics_fold is
  'One metrics fold at a time, a lock only: metrics_snapshot() tries SHARE UPDATE EXCLUSIVE NOWAIT on it. No rows; no role but the owner may lock it.';
-- The watch is released by ending the watching transaction now.
drop function if exists bitrix_sync.unwatch_intake();

-- 4. _close_rebind_request takes the workflow's id instead of a row (sql/rebind.sql).
drop function if exists bitrix_sync._close_rebind_request(bitrix_sync.workflow_instances);

-- #include sql/common.sql
-- #include sql/retry.sql
-- #include sql/tracing.sql
-- #include sql/state_machines.sql
-- #include sql/row_guards.sql
-- #include sql/settings.sql
-- #include sql/limiter.sql
-- #include sql/mapping.sql
-- #include sql/cutover.sql
-- #include sql/queue.sql
-- #include sql/enqueue.sql
-- #include sql/workflows.sql
-- #include sql/commands.sql
-- #include sql/webhooks.sql
-- #include sql/receiver.sql
-- #include sql/alerts.sql
-- #include sql/alert_mirror.sql
-- #include sql/snapshots.sql
-- #include sql/reconciliation.sql
-- #include sql/rebind.sql
-- #include sql/admin_common.sql
-- #include sql/parked.sql
-- #include sql/rebind_admin.sql
-- #include sql/dead_letters.sql
-- #include sql/retention.sql
-- #include sql/metrics.sql
-- #include sql/status.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
