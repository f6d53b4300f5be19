-- The intake watch (§6.2, §8): a sleeping sync loop is told of new intents by NOTIFY.
--
-- Locks no other role can take (migration 000028; docs/security.md). The watch and the fold are
-- table locks on two tables without rows or columns, bitrix_sync.lock_intake_watch and
-- bitrix_sync.lock_intake_fold, taken only by security definer functions: LOCK TABLE needs
-- rights on the table, which only the owner has, and the schema is out of reach of the App and of
-- any other role. They were advisory locks (727014/1..3), which every role that can connect may
-- take. What another role can still get on any table, by its oid and without rights, is ACCESS
-- SHARE (pg_relation_size) and ROW EXCLUSIVE, kept to the end of its transaction (a failing
-- nextval() on the table), and it can wait for SHARE UPDATE EXCLUSIVE (brin_summarize_range() on a
-- table fails only once it has the lock). So the fold and a loop's claim to the watch use SHARE
-- UPDATE EXCLUSIVE (compatible with both, conflicting with itself), the App's mark is ROW EXCLUSIVE
-- (compatible with both), and the watch SHARE, which a role holding ROW EXCLUSIVE on the watch table
-- does block: the loop then gives up watching and polls (worker.poll_interval_ms) and no App commit
-- NOTIFYs, since the loop tries without queueing (NOWAIT) and so never makes the App's NOWAIT fail.
-- Nothing here writes a row, takes a transaction ID or holds a snapshot.

-- The intake watch: SHARE on bitrix_sync.lock_intake_watch, held by a sleeping loop's transaction.
create or replace function bitrix_sync.watch_intake() returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  begin
    -- One sleeper per database is enough: NOTIFY wakes every listener. SHARE UPDATE EXCLUSIVE
    -- conflicts with another loop's and not with the App's ROW EXCLUSIVE.
    lock table bitrix_sync.lock_intake_watch in share update exclusive mode nowait;
    -- SHARE waits for the App transactions that recorded an intent without a NOTIFY (they hold ROW
    -- EXCLUSIVE) to end, so the caller's next look at the queue sees their intents. From here until
    -- the caller's transaction ends, every intent NOTIFYs. Tried without queueing, every 5 ms for
    -- up to 1 s: a request waiting in the lock's queue would make the App's NOWAIT fail, so a role
    -- holding ROW EXCLUSIVE on the table could make App commits NOTIFY for as long as it waits.
    for i in 1 .. 200 loop
      begin
        lock table bitrix_sync.lock_intake_watch in share mode nowait;
        return true;
      exception when lock_not_available then
        perform pg_sleep(0.005);
      end;
    end loop;
    -- A long App transaction: give up watching this time; the fallback poll covers it. Raised to
    -- the block around, which gives the sleeper's lock back too.
    raise exception using errcode = 'lock_not_available';
  exception when lock_not_available then
    return false;
  end;
end $$;
comment on function bitrix_sync.watch_intake() is
  'Called by a sync loop whose intake found nothing, before it sleeps, inside a transaction of its own on a connection of its own (a LISTEN connection gets no notification inside a transaction): takes the intake watch (SHARE on bitrix_sync.lock_intake_watch) once the App transactions that recorded intents without a NOTIFY have ended; from then on han_app.enqueue_contact_sync() NOTIFYs, until the caller ends its transaction when it wakes. The caller must look at the queue once more before sleeping. Returns false (nothing held) when another loop watches or the watch stays taken for over 1 s (a long App transaction); the fallback poll covers that. Takes no transaction ID and keeps no snapshot.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.watch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop takes the intake watch before it sleeps, in a transaction it ends when it wakes (the App''s intents NOTIFY meanwhile); security definer: the lock is on a table only the owner may lock.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
