-- Migration tooling (docs/migrations.md): the runtime role's rights on graphile-worker's and
-- graphile-migrate's own schemas move to sql/worker_grants.sql, which every migration run now also
-- applies afterwards (a graphile-worker upgrade adds tables); sql/grants.sql keeps the project's own
-- schemas.
set local lock_timeout = '10s';

-- #include sql/grants.sql
-- #include sql/worker_grants.sql
