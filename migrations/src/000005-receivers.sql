-- Receivers (§10.1, docs/receivers.md): accept_webhook(), the single statement a robot webhook
-- request runs (entity type check + durable inbox insert), with its grant to bitrix_sync_user.
set local lock_timeout = '10s';

-- #include sql/receiver.sql
