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

-- No apply_privileges() here: no object is new and no privilege decision changes (db:check's drift
-- check says so), and it takes seconds while the triggers' table locks would be held until the
-- commit; the receivers' and the App's writes to these tables would wait that long (drill:rollback
-- saw the receivers refused 503). Each trigger is replaced in a moment; the commit follows at once.
-- #include sql/guards/transitions.sql
-- #include sql/metrics/counters.sql
