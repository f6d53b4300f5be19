-- A CRM command costs the database less (issue 36): the transition guards of every state machine
-- have their legal edges compiled into the trigger's WHEN clause, so a legal transition runs no
-- PL/pgSQL (sql/guards/transitions.sql), and the transition counters of
-- commands count per statement from transition tables instead of once per row
-- (sql/metrics/counters.sql).
--
-- Expand only: triggers replaced, one trigger function body replaced with its signature unchanged;
-- what is counted and what is refused are unchanged.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/guards/transitions.sql
-- #include sql/metrics/counters.sql

select bitrix_sync.apply_privileges();
