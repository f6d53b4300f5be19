-- Recovery after a database restart in seconds (issue 36). A write whose reply was lost (a sender
-- that died, or a database away when the reply came and the lease expired) waited for a late
-- execution counted from the moment it became uncertain: a lease expiry, a minute or more after the
-- request had certainly ended. The send marker now records when the request is out and given up at
-- the latest (the sender's send window plus its HTTP timeout), and the late-write wait counts from
-- there (src/workflows/decide/unanswered-write.ts).
--
-- 1. crm_commands.reply_deadline_at, written by send_commands with each send marker; null for sends
--    marked before this migration or by a sender that does not say (the wait then counts as before).
-- 2. send_commands takes the deadline as a fourth argument with a default: the three-argument form is
--    dropped, and a caller that passes three still resolves to the new one.
-- 3. bring_forward_commands, when the portal answers again after failing as a whole, also cuts the
--    wait of a workflow waiting for a late write (awaiting_late_write) to the moment that write
--    settles (step_data.late_write_settles_at, written by the step), never below: the backoff the
--    portal's failures grew is dropped, the wait for a late execution is not.
-- 4. The release that records the portal's answer for every replica's readiness (000039) no longer
--    waits for the bucket's row when another session holds it: the next answer stamps it.
--
-- Locks and time: a nullable column without a default (catalogue only, no rewrite) and three functions.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

alter table bitrix_sync.crm_commands add column if not exists reply_deadline_at timestamptz;
comment on column bitrix_sync.crm_commands.reply_deadline_at is
  'Stamped by send_commands with each send marker: the moment by which the request is out and given up by the sender at the latest (its send window plus its HTTP timeout). An unanswered write''s late-write wait counts from here. Null when the sender did not say.';

drop function if exists bitrix_sync.send_commands(bigint[], uuid[], uuid);
delete from bitrix_sync.privilege_decisions
 where object_type = 'function' and object_name = 'bitrix_sync.send_commands(bigint[],uuid[],uuid)';

-- #include sql/commands/claim.sql
-- #include sql/commands/complete.sql
-- #include sql/commands/tables.sql
-- #include sql/limiter/acquire.sql
select bitrix_sync.apply_privileges();
