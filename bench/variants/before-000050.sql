-- A variant for BENCH_SETUP_SQL (npm run bench:engine, bench:peers, bench:e2e): migration 000050's
-- set-based intake undone on a database at 000050, so the two can be run alternately in one session.
-- take_sync_tasks() is put back as 000049 left it: start_or_join_workflow() once per intent, in claim
-- order, then one UPDATE completes the batch. docs/performance.md, "Issue 36, fifth round".
set jit = off;
create or replace function bitrix_sync.take_sync_tasks(
  p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[],
  p_trace_contexts text[]
) returns table (task_id uuid, workflow_id uuid, action text, previous_trace_context text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer := coalesce(cardinality(p_ids), 0);
  v_out record;
  v_done integer;
begin
  if coalesce(cardinality(p_lease_tokens), 0) <> v_n or coalesce(cardinality(p_user_ids), 0) <> v_n
     or coalesce(cardinality(p_intent_types), 0) <> v_n or coalesce(cardinality(p_content_hashes), 0) <> v_n
     or coalesce(cardinality(p_trace_contexts), 0) <> v_n or v_n > 1000 then
    raise exception 'take_sync_tasks needs six arrays of one length, at most 1000'
      using errcode = 'BS004',
            hint = 'Pass intent ID, lease token, user ID, intent type, content hash and trace context per claimed intent, in claim order.';
  end if;
  -- In the order given (claim order): a user's later intent joins the workflow its earlier one
  -- started. Any refusal (a stale lease: BS001) fails the whole call, and the caller takes the
  -- intents one by one instead.
  for i in 1 .. v_n loop
    select * into v_out
      from bitrix_sync.start_or_join_workflow(p_user_ids[i], p_intent_types[i], p_ids[i], p_content_hashes[i],
                                              p_trace_contexts[i]);
    task_id := p_ids[i];
    workflow_id := v_out.workflow_id;
    action := v_out.action;
    previous_trace_context := v_out.previous_trace_context;
    return next;
  end loop;
  if v_n = 0 then
    return;
  end if;
  -- Then every intent leased -> processed in one statement, as complete_sync_task() does one (its
  -- check of the App's tables once for the batch): the rows returned above are sent only when the
  -- call commits, and an intent no longer held under its token (a newer intent took it back, or
  -- its lease was reclaimed) refuses the whole call (BS001) as it did.
  perform bitrix_sync._check_queue_tables();
  update han_app.sync_queue q
     set status = 'processed', completed_at = now(), locked_by = null, locked_until = null,
         lease_token = null, updated_at = now()
    from unnest(p_ids, p_lease_tokens) as t(id, token)
   where q.id = t.id and q.status = 'leased' and q.lease_token = t.token;
  get diagnostics v_done = row_count;
  if v_done <> v_n then
    -- Name the first intent not completed here (a duplicate in the arrays: the first one).
    perform bitrix_sync._refuse_stale('sync task', coalesce(
      (select u.id from unnest(p_ids) with ordinality as u(id, ord)
        where not exists (select 1 from han_app.sync_queue q where q.id = u.id and q.status = 'processed'
                                                               and q.completed_at = now())
        order by u.ord limit 1),
      p_ids[1])::text);
  end if;
end $$;
