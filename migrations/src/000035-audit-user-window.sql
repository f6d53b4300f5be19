-- The convergence audit's user kinds at scale (docs/performance.md, "Scale"). bench:scale measured
-- refresh_user_drift, which judges unmapped_user and inactive_user_linked in SQL on every sampled
-- run, growing with the installation: 130 ms at 10 000 users, 6.9 s at 1 M (every user, every
-- hour). A sampled run now judges a window of users in id order from where the last one stopped:
-- audit.users_per_run (new setting, 10 000) or twice the users' share of audit.period_days when
-- that is more, so every user is judged at least once in half the period and a run's cost follows
-- its window. A full run ({"all": true}) still judges every user. Findings of the user kinds
-- outside the window stay until their window comes.
--
-- 1. audit_state remembers the place (users_after_id) and when the current round started and the
--    last one ended; status_audit shows the two times.
-- 2. refresh_user_drift (sql/convergence_audit.sql), the setting (sql/settings.sql); the users are
--    counted as the links are, through _planner_count, which _active_link_count now uses too. The window is judged in one pass over its users (before: one over the
--    users and one over the links, each reading users and profiles), an active link found by an
--    index-only probe of entity_external_mapping_active_entity_uq.
-- 3. Work in progress is asked of the few users concerned: _drift_busy_users answers only for the
--    users it is given, through each table's user index (its all-users form, null, read every
--    snapshot: 1.9 s a call at 10 M users); refresh_user_drift and record_registered_contacts pass
--    the users they flag and those whose findings they may clear.
--
-- Locks and time: three nullable columns without defaults on the one-row audit_state (a brief
-- ACCESS EXCLUSIVE on a table only the audit writes); nothing touches the App's tables or the sync
-- path's rows.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table bitrix_sync.audit_state
  add column if not exists users_after_id uuid,
  add column if not exists users_round_started_at timestamptz,
  add column if not exists users_round_ended_at timestamptz;
comment on column bitrix_sync.audit_state.users_after_id is
  'Where the sampled runs'' round over the users stands: the last user id the last window judged; null: the next window starts from the first user.';
comment on column bitrix_sync.audit_state.users_round_started_at is
  'When the current round of the sampled runs over the users (the user kinds) started.';
comment on column bitrix_sync.audit_state.users_round_ended_at is
  'When the last round over the users ended (its last window reached past the last user); every user was judged between its start and then.';

-- #include sql/settings.sql
-- #include sql/convergence_audit.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
