-- Checks every lease and outcome function shares: a code is a safe identifier, never raw text
-- (§15, §16), and a caller whose lease was taken over is refused with BS001 (docs/errors.md).

create or replace function bitrix_sync._check_code(p_code text) returns void
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
  -- ^[a-z0-9][a-z0-9_.]{0,63}$ without the counted repetition, which PostgreSQL's regular
  -- expressions pay for on every call (about 5 µs against 0.5; issue 36, migration 000048).
  if p_code is null or length(p_code) > 64 or p_code !~ '^[a-z0-9][a-z0-9_.]*$' then
    raise exception 'error code must be a safe snake_case code of at most 64 characters'
      using errcode = 'BS004',
            hint = 'Pass a classifier code such as crm_timeout, never raw error text (§9, §16).';
  end if;
end $$;
comment on function bitrix_sync._check_code(text) is
  'Refuses anything but a safe snake_case error code, so raw text (which may carry PII or secrets) never reaches a row. SQLSTATE BS004.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._check_code(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: refuses raw text as an error code.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._refuse_stale(p_what text, p_id text) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  raise exception '% % is not held under this lease token', p_what, p_id
    using errcode = 'BS001',
          detail = 'The lease expired and another worker reclaimed the row, a newer intent superseded it, or it already moved on.',
          hint = 'Drop this result: the current holder or the next claim will process the row.';
end $$;
comment on function bitrix_sync._refuse_stale(text, text) is
  'Raises BS001 for a completion that does not present the current lease token (a stale holder).';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
