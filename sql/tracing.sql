-- Trace context across the durable queue (issue 12, docs/observability.md): the service stores a W3C
-- traceparent with each workflow, command and inbox event, so work resumed by another loop, process
-- or release is traced under the intent or request that caused it. A context is only ever an
-- optional hint: a malformed one is dropped here instead of failing the write that carries it.

create or replace function bitrix_sync._trace_context(p_traceparent text) returns text
language sql immutable parallel safe as $$
  select case
    when p_traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
         and substr(p_traceparent, 4, 32) <> repeat('0', 32)
         and substr(p_traceparent, 37, 16) <> repeat('0', 16)
    then p_traceparent
  end
$$;
comment on function bitrix_sync._trace_context(text) is
  'The argument when it is a valid W3C traceparent (version 00, non-zero trace and span ids), else null: what the functions that store a trace context keep.';

