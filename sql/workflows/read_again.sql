-- One more read of a Contact that has just become its user's: linked (sql/mapping/open.sql, links_many.sql), or its
-- registration flag written on again by the service (sql/commands/complete.sql). An edit a manager
-- made while the Contact was not yet the user's in the service's eyes was answered and dropped; this
-- read applies it. Here, below both families, so both may use it; it uses no function.

create or replace function bitrix_sync._read_again_after_link(p_contact_ids text[], p_workflow_ids uuid[])
returns void
-- enable_seqscan off: the inbox, the workflows and the mappings are probed by key in every plan; a
-- generic plan made while the statistics were those of a few rows would keep a sequential scan as the
-- tables grow.
language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
declare
  v_requeue text[];
begin
  -- A robot's call about a Contact that came while its link was being made was (or will be) answered
  -- "not ours" from a read of the mappings taken before the link commits: a manager's edit right
  -- after the create, or the portal's own workflow on create. Likewise a call answered while the
  -- Contact's registration flag was still off, before the service's own write turned it on again
  -- (a user deactivated and back: the link is made when the pass finds the Contact, the flag written
  -- a step later). One more read of the Contact covers it: an event queued now, processed once this
  -- transaction commits (a pending event of the Contact coalesces with it). Matched: the Contact's
  -- events not yet processed (a claim may have read the mappings or the Contact already), and those
  -- processed as unknown_mapping or registration_inactive since the workflow began (before it, the
  -- workflow's own read of the Contact saw the edit) or since the Contact's last link closed,
  -- whichever is earlier: an edit made while the Contact had no link (its user deactivated, say) is
  -- the user's again once linked, and a pass that restarted for a newer intent may end without the
  -- read that applies it (drill:rollback found such edits lost until the reconciliation, once for
  -- each outcome). No lock: a processor that claims after the commit sees the link and the flag;
  -- one that claimed before is matched here.
  -- Scalar subqueries, one probe of the inbox's indexes per Contact and outcome (each outcome has its
  -- partial index): an EXISTS may be planned as a hash of every unprocessed call, which a backlog of
  -- robot calls makes large.
  select array_agg(x.contact_id order by x.n) into v_requeue
    from (select i.contact_id, min(i.n) as n
            from unnest(p_contact_ids, p_workflow_ids) with ordinality as i(contact_id, workflow_id, n)
            cross join lateral (
              select least(
                       (select coalesce(min(w.created_at), now() - interval '1 hour')
                          from bitrix_sync.workflow_instances w where w.id = i.workflow_id),
                       (select max(m.closed_at) from bitrix_sync.entity_external_mapping m
                         where m.external_id = i.contact_id and m.closed_at is not null)) as since
            ) s
           where coalesce((select true from bitrix_sync.webhook_inbox b
                            where b.receiver = 'contact' and b.entity_id = i.contact_id
                              and b.status in ('received', 'retry_wait', 'processing')
                            limit 1), false)
              or coalesce((select true from bitrix_sync.webhook_inbox b
                            where b.outcome = 'unknown_mapping' and b.entity_id = i.contact_id
                              and b.receiver = 'contact' and b.received_at >= s.since
                            limit 1), false)
              or coalesce((select true from bitrix_sync.webhook_inbox b
                            where b.outcome = 'registration_inactive' and b.entity_id = i.contact_id
                              and b.receiver = 'contact' and b.received_at >= s.since
                            limit 1), false)
           group by i.contact_id) x;
  if v_requeue is not null then
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    select 'contact', 'linked', 3, c from unnest(v_requeue) as c;
    perform pg_notify('bitrix_sync_webhooks', 'contact');
  end if;
end $$;
comment on function bitrix_sync._read_again_after_link(text[], uuid[]) is
  'After p_contact_ids became their users'' (linked, or their registration flag written on; element k by workflow p_workflow_ids[k], null when none): queues one more read (webhook event linked) of each Contact whose robot call is unprocessed, or was answered unknown_mapping or registration_inactive since its workflow began or since the Contact''s last link closed, whichever is earlier. The rule open_mapping(), open_mappings(), complete_command() and complete_commands() share.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._read_again_after_link(text[],uuid[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of open_mapping(), open_mappings(), complete_command() and complete_commands().')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

