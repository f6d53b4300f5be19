-- Intake of a claimed batch in one call (issue 14), its starts set-based (issue 36, fifth round).
-- start_or_join_workflow() takes one intent: a lookup of the user's active workflow under a row
-- lock, the check against the user's last workflow, then an INSERT, each paying PostgreSQL's fixed
-- cost per statement for one row. Most intents of a backlog start a workflow for a user the batch
-- names once and who has no active workflow: those are found by one query and started by one
-- INSERT per run of them in the batch's order. Every other intent (its user has an active workflow,
-- or several intents in the batch, or another intake started one a moment ago) goes through
-- start_or_join_workflow() in its place, as before. Each user is wholly on one path, so a user's
-- intents keep their order, and the users' workflows are locked in the batch's order as before.

create or replace function bitrix_sync.take_sync_tasks(
  p_ids uuid[], p_lease_tokens uuid[], p_user_ids uuid[], p_intent_types text[], p_content_hashes text[],
  p_trace_contexts text[]
) returns table (task_id uuid, workflow_id uuid, action text, previous_trace_context text)
-- enable_seqscan off: every statement below finds its rows by key (the batch's users, intents), as
-- issue_commands() does and for the same reason: a generic plan made on a few rows' statistics
-- would keep a sequential scan as the tables grow.
language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
declare
  v_n integer := coalesce(cardinality(p_ids), 0);
  v_workflow uuid[];
  v_action text[];
  v_previous text[];
  v_set integer[];
  v_same integer[];
  v_run integer[] := '{}'::integer[];
  v_single integer[];
  v_started integer[];
  v_started_ids uuid[];
  v_i integer;
  v_j integer;
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
  if v_n = 0 then
    return;
  end if;
  v_workflow := array_fill(null::uuid, array[v_n]);
  v_action := array_fill(null::text, array[v_n]);
  v_previous := array_fill(null::text, array[v_n]);

  -- The set path's intents: those whose user the batch names once and who has no active workflow.
  -- One equal to the user's last workflow, succeeded (same intent, same non-null content hash), is
  -- unchanged, as start_or_join_workflow() says, and takes no lock.
  with batch as (
    select min(u.ord)::integer as ord
      from unnest(p_user_ids) with ordinality as u(user_id, ord)
     group by u.user_id
    having count(*) = 1
  )
  select coalesce(array_agg(b.ord order by b.ord), '{}'),
         coalesce(array_agg(b.ord order by b.ord) filter (
           where p_content_hashes[b.ord] is not null and l.state = 'succeeded'
             and l.intent_type = p_intent_types[b.ord] and l.content_hash = p_content_hashes[b.ord]), '{}')
    into v_set, v_same
    from batch b
    left join lateral (
      select w.state, w.intent_type, w.content_hash from bitrix_sync.workflow_instances w
       where w.user_id = p_user_ids[b.ord] order by w.created_at desc limit 1
    ) l on true
    -- A probe of the one-active-per-user index per user, as a LATERAL with LIMIT so that it can only
    -- be one. Written as NOT EXISTS, the planner may join it unparameterised: every user then read
    -- the whole index of active workflows (bench:scale at 10 M users with 2 048 of them active:
    -- 102 658 buffers and 42 ms a batch of 50, against 151 buffers and 1.3 ms so), and a backlog of
    -- active workflows made every intake slower.
    left join lateral (
      select true as active from bitrix_sync.workflow_instances a
       where a.user_id = p_user_ids[b.ord] and a.state not in ('succeeded', 'failed', 'cancelled')
       limit 1
    ) a on true
   where a.active is null;
  foreach v_i in array v_same loop
    v_action[v_i] := 'unchanged';
  end loop;

  -- In claim order, which is by user (the caller sorts the batch): each run of set-path intents is
  -- started by one INSERT, then the next intent goes through start_or_join_workflow(). The users'
  -- workflows are so locked in the batch's order, as one call per intent locked them, and two
  -- intakes whose batches share users never wait on each other in a cycle. A user whose workflow
  -- another intake inserted meanwhile conflicts with the one-active-per-user index (the INSERT waits
  -- for that transaction, as start_or_join_workflow()'s does) and is left to the single call, which
  -- joins it.
  for v_i in 1 .. v_n + 1 loop
    continue when v_i <= v_n and v_action[v_i] is not null;
    if v_i <= v_n and v_i = any (v_set) then
      v_run := v_run || v_i;
      continue;
    end if;
    v_single := '{}'::integer[];
    if cardinality(v_run) > 0 then
      with started as (
        insert into bitrix_sync.workflow_instances (workflow_type, intent_type, user_id, source_task_id,
                                                    content_hash, trace_context)
        select p_intent_types[r.ord], p_intent_types[r.ord], p_user_ids[r.ord], p_ids[r.ord],
               p_content_hashes[r.ord], bitrix_sync._trace_context(p_trace_contexts[r.ord])
          from unnest(v_run) as r(ord)
         order by r.ord
        on conflict do nothing
        returning id, user_id
      )
      select coalesce(array_agg(r.ord order by r.ord), '{}'), coalesce(array_agg(s.id order by r.ord), '{}')
        into v_started, v_started_ids
        from unnest(v_run) as r(ord) join started s on s.user_id = p_user_ids[r.ord];
      for v_k in 1 .. coalesce(cardinality(v_started), 0) loop
        v_workflow[v_started[v_k]] := v_started_ids[v_k];
        v_action[v_started[v_k]] := 'started';
      end loop;
      if cardinality(v_started) > 0 then
        perform pg_notify('bitrix_sync_workflows', '');
      end if;
      -- Those another intake started meanwhile go through the single call, in their place.
      v_single := array(select r.ord from unnest(v_run) as r(ord) where v_action[r.ord] is null order by r.ord);
      v_run := '{}'::integer[];
    end if;
    if v_i <= v_n then
      v_single := v_single || v_i;
    end if;
    foreach v_j in array v_single loop
      select * into v_out
        from bitrix_sync.start_or_join_workflow(p_user_ids[v_j], p_intent_types[v_j], p_ids[v_j],
                                                p_content_hashes[v_j], p_trace_contexts[v_j]);
      v_workflow[v_j] := v_out.workflow_id;
      v_action[v_j] := v_out.action;
      v_previous[v_j] := v_out.previous_trace_context;
    end loop;
  end loop;

  -- Then every intent leased -> processed in one statement, as complete_sync_task() does one (its
  -- check of the App's tables once for the batch): the rows returned are sent only when the call
  -- commits, and an intent no longer held under its token (a newer intent took it back, or its
  -- lease was reclaimed) refuses the whole call (BS001).
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
  return query
    select p_ids[o.ord], v_workflow[o.ord], v_action[o.ord], v_previous[o.ord]
      from generate_series(1, v_n) as o(ord) order by o.ord;
end $$;
comment on function bitrix_sync.take_sync_tasks(uuid[], uuid[], uuid[], text[], text[], text[]) is
  'Intake of a claimed batch in one call, with the outcome of start_or_join_workflow() for each intent in the order given and then complete_sync_task() for all, as the caller would one intent per transaction. An intent whose user the batch names once and who has no active workflow is found unchanged against the user''s last succeeded workflow, or started by one INSERT per run of such intents in the order given; the others, and any whose user another intake started meanwhile, go through start_or_join_workflow() in their place, so workflows are locked in the order given. One row per intent (its workflow, the action, the previous trace context), in the order given. A stale lease refuses the whole call (BS001); arrays of different lengths or over 1000 elements BS004.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.take_sync_tasks(uuid[],uuid[],uuid[],text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake of a claimed batch in one call.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
