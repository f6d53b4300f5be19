-- Inbox events after a portal outage (issue 36, goal 6: the outage drain). When the portal answers
-- again, the pump brings forward the commands and workflows that waited only for it
-- (bring_forward_commands()); an inbox event whose read of the portal failed the same way kept its
-- backoff, up to retry.max_ms, and the Contact's change reached the App that much later (the chaos
-- suite's short mode in CI: two webhooks applied 112 s after the last fault, past its 90 s bound).
-- bring_forward_webhooks() makes them due now; the pump calls it beside bring_forward_commands().
-- Expand only: one new function. Locks: none beyond the catalogue.
set local lock_timeout = '10s';
set local search_path = pg_catalog, pg_temp;

-- #include sql/webhooks/bring_forward.sql

select bitrix_sync.apply_privileges();
