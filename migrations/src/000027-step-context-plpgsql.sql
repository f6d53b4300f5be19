-- step_context() back in PL/pgSQL, returning one composite value (bitrix_sync.step_context_t)
-- (issue 14): as a SQL function (000026) PostgreSQL planned its statements on every call, which cost
-- more than the round trip it saves. Same signature, same columns, same privileges.
set local lock_timeout = '10s';

-- #include sql/workflows.sql
-- #include sql/privileges.sql
-- #include sql/grants.sql
