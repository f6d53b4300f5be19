-- Trace context across the durable queue (issue 12, docs/observability.md): the service stores a W3C
-- traceparent with each workflow, command and inbox event, so work resumed by another loop, process
-- or release is traced under the intent or request that caused it. A context is only ever an
-- optional hint: a malformed one is dropped here instead of failing the write that carries it.
--
-- No pinned search_path, on purpose: a SQL function with a SET clause is never inlined, and this one
-- runs once per event inside accept_webhooks()' insert (measured: 57 -> 77 µs per event pinned,
-- bench:search-path; migration 000028). So every operator and function is written schema-qualified
-- (OPERATOR(pg_catalog.~), pg_catalog.substr): whatever the caller's search_path holds, nothing
-- else can be picked up (test/integration/function-search-path.test.ts checks the body).
-- The form is checked without counted repetition (a length of 55, hex runs between dashes, the inner
-- dashes at 36 and 53: exactly ^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$): PostgreSQL's regular
-- expressions pay for {32} on every value, about 6 µs against 1.5 (issue 36, migration 000048).

create or replace function bitrix_sync._trace_context(p_traceparent text) returns text
language sql immutable parallel safe as $$
  select case
    when pg_catalog.length(p_traceparent) operator(pg_catalog.=) 55
         and p_traceparent operator(pg_catalog.~) '^00-[0-9a-f]+-[0-9a-f]+-[0-9a-f]+$'
         and pg_catalog.substr(p_traceparent, 36, 1) operator(pg_catalog.=) '-'
         and pg_catalog.substr(p_traceparent, 53, 1) operator(pg_catalog.=) '-'
         and pg_catalog.substr(p_traceparent, 4, 32) operator(pg_catalog.<>) pg_catalog.repeat('0', 32)
         and pg_catalog.substr(p_traceparent, 37, 16) operator(pg_catalog.<>) pg_catalog.repeat('0', 16)
    then p_traceparent
  end
$$;
comment on function bitrix_sync._trace_context(text) is
  'The argument when it is a valid W3C traceparent (version 00, non-zero trace and span ids), else null: what the functions that store a trace context keep. Inlined into its callers: no pinned search_path, every operator and name schema-qualified.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue_command, start_or_join_workflow, accept_webhooks).')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
