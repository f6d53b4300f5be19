-- The public proxy's refusals of a source address, journaled (§10.1: for a request refused by its
-- address only the time, the source IP, the receiver route and the outcome are kept, with a bounded
-- retention; docs/deployment.md, "The proxy's refusals"). nginx hands every request it refuses to
-- the service's internal route (src/inbound/edge.ts): no token, query, body or header of the request,
-- only the reason, the receiver and the address nginx saw. The service counts each refusal in
-- bitrix_sync_webhook_rejected_total and, for reason source_ip, gathers the addresses for a few
-- seconds and records them here in one call: per address and receiver, how many, first and last
-- seen. The journal is bounded by the same call: rows last seen more than 30 days ago go, and past
-- 10 000 rows the least recently seen. The allow-list never grows from it (§10.1).

create or replace function bitrix_sync.record_refused_sources(
  p_sources inet[], p_receivers text[], p_counts integer[], p_first_seen timestamptz[], p_last_seen timestamptz[]
) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer := coalesce(cardinality(p_sources), 0);
  v_rows integer;
begin
  if coalesce(cardinality(p_receivers), 0) <> v_n or coalesce(cardinality(p_counts), 0) <> v_n
     or coalesce(cardinality(p_first_seen), 0) <> v_n or coalesce(cardinality(p_last_seen), 0) <> v_n then
    raise exception 'the refused sources come as five arrays of one length'
      using errcode = 'BS004', hint = 'Pass one address, receiver, count, first and last time per entry (src/inbound/edge.ts).';
  end if;
  if v_n > 10000 then
    raise exception 'at most 10 000 refused sources a call, not %', v_n
      using errcode = 'BS004', hint = 'Record them in smaller groups.';
  end if;
  if exists (select 1 from unnest(p_sources, p_receivers, p_counts, p_first_seen, p_last_seen) u(s, r, c, f, l)
              where s is null or masklen(s) <> case family(s) when 4 then 32 else 128 end
                 or r is null or r not in ('contact', 'alert', 'none')
                 or c is null or c < 1 or f is null or l is null or f > l) then
    raise exception 'a refused source is not one address, receiver contact, alert or none, a positive count and first <= last'
      using errcode = 'BS004', hint = 'A bug in the caller: it passes what nginx reported, checked.';
  end if;
  insert into bitrix_sync.refused_sources as e (source_ip, receiver, refusals, first_seen_at, last_seen_at)
  select u.s, u.r, sum(u.c), min(u.f), max(u.l)
    from unnest(p_sources, p_receivers, p_counts, p_first_seen, p_last_seen) u(s, r, c, f, l)
   group by u.s, u.r
  on conflict (source_ip, receiver) do update
    set refusals = e.refusals + excluded.refusals,
        first_seen_at = least(e.first_seen_at, excluded.first_seen_at),
        last_seen_at = greatest(e.last_seen_at, excluded.last_seen_at);
  get diagnostics v_rows = row_count;
  -- Bounded retention (§10.1).
  delete from bitrix_sync.refused_sources e where e.last_seen_at < pg_catalog.now() - interval '30 days';
  delete from bitrix_sync.refused_sources e
   where (e.source_ip, e.receiver) in (select k.source_ip, k.receiver from bitrix_sync.refused_sources k
                                         order by k.last_seen_at desc, k.source_ip, k.receiver offset 10000);
  return v_rows;
end $$;
comment on function bitrix_sync.record_refused_sources(inet[], text[], integer[], timestamptz[], timestamptz[]) is
  'Adds what the service gathered of the proxy''s source_ip refusals (per address and receiver: count, first and last seen) to refused_sources, then trims the journal to 30 days and 10 000 rows. Returns the rows written. Addresses only: no query, body, header or token reaches it.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_refused_sources(inet[],text[],integer[],timestamp with time zone[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[],
   'The proxy''s source_ip refusals, as the service gathered them (security definer: the runtime has no right on the journal).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace view bitrix_sync.status_refused_sources as
select e.source_ip, e.receiver, e.refusals, e.first_seen_at, e.last_seen_at,
       -- New: first refused within the last day; the addresses to look at after an alert.
       e.first_seen_at > pg_catalog.now() - interval '1 day' as new
  from bitrix_sync.refused_sources e
 where e.last_seen_at >= pg_catalog.now() - interval '30 days'
 order by e.first_seen_at desc, e.source_ip, e.receiver;
comment on view bitrix_sync.status_refused_sources is
  'The journal of source addresses the public proxy refused (reason source_ip), newest first, for the runbook (docs/runbook.md, BitrixSyncWebhookSourcesRefused): per address and receiver route (contact, alert, none: any other path), how many refusals, first and last seen, and whether it is new (first seen within a day). Never a query, body or token.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('view', 'bitrix_sync.status_refused_sources', array[]::text[], array['SELECT'], array[]::text[],
   'Runbook: the addresses the proxy refused, which are new; no query, body or token.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
