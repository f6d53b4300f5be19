-- The workflows lane steps a claim in groups, each in one transaction (issue 14; src/db/statement-
-- batcher.ts, docs/performance.md "Third round"). Two steps of one group can read a Contact's
-- snapshot before either writes it, so apply_crm_master_fields() now refuses, under the snapshot
-- row's lock, a read older than the snapshot itself (sql/snapshots.sql): it changes nothing and
-- returns the snapshot as it is. Signatures are unchanged.
set local lock_timeout = '10s';

-- #include sql/snapshots.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
