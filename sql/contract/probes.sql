-- The portal's REST contract as confirmed by `npm run preflight -- --write` (docs/decisions.md,
-- docs/portal-setup.md): the forms the reference leaves open are settings (contract.*, and
-- reconcile.opened_filter), and a probe that passed records the portal and the forms it proved in
-- bitrix_sync.crm_contract_probes. Readiness says crm_contract_unconfirmed (degraded, not failing)
-- until a pass covers the configured portal and the forms the active settings use.

create or replace function bitrix_sync.crm_contract_forms() returns jsonb
language sql stable set search_path = pg_catalog, pg_temp as $$
  select jsonb_build_object(
    'registered_write', bitrix_sync._active_setting('contract.registered_write'),
    'registered_filter', bitrix_sync._active_setting('contract.registered_filter'),
    'date_filter', bitrix_sync._active_setting('contract.date_filter'),
    'opened_filter', bitrix_sync._active_setting('reconcile.opened_filter'))
$$;
comment on function bitrix_sync.crm_contract_forms() is
  'The contract forms the active settings use (contract.registered_write, contract.registered_filter, contract.date_filter, reconcile.opened_filter), as one JSON object: what a probe records and readiness compares.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.crm_contract_forms()', array[]::text[], array[]::text[], array[]::text[],
   'Internal helper of the contract functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.record_crm_contract_probe(p_portal_host text, p_forms jsonb, p_run_id text)
returns bigint
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_id bigint;
  v_keys text[];
begin
  if p_portal_host is null or p_portal_host !~ '^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$' then
    raise exception 'a contract probe needs the portal host it ran against'
      using errcode = 'BS004', hint = 'Pass BITRIX_SYNC_PORTAL_HOST, e.g. ''example.bitrix24.ru'' (host, optionally :port).';
  end if;
  if p_run_id is null or p_run_id !~ '^[0-9a-f]{8,32}$' then
    raise exception 'a contract probe needs its run id'
      using errcode = 'BS004', hint = 'Pass the run id preflight printed: 8 to 32 lowercase hexadecimal characters.';
  end if;
  select array_agg(k order by k) into v_keys from jsonb_object_keys(
    case when jsonb_typeof(p_forms) = 'object' then p_forms else '{}'::jsonb end) k;
  if v_keys is distinct from array['date_filter', 'opened_filter', 'registered_filter', 'registered_write']
     or exists (select 1 from jsonb_each(p_forms) e where jsonb_typeof(e.value) <> 'string'
                                                       or length(e.value #>> '{}') not between 1 and 16) then
    raise exception 'the forms of a contract probe must be the four the settings name'
      using errcode = 'BS004',
            hint = 'Pass {"registered_write", "registered_filter", "date_filter", "opened_filter"} as strings, as bitrix_sync.crm_contract_forms() returns them.';
  end if;
  insert into bitrix_sync.crm_contract_probes (portal_host, forms, run_id)
  values (lower(p_portal_host), p_forms, p_run_id)
  returning id into v_id;
  return v_id;
end $$;
comment on function bitrix_sync.record_crm_contract_probe(text, jsonb, text) is
  'Records a passed write probe (npm run preflight -- --write): the portal host, the forms it proved and its run id; the time and the login are the row''s. BS004 when an argument is malformed.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_crm_contract_probe(text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'npm run preflight -- --write records its pass, on the service''s connection.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.crm_contract_status(p_portal_host text) returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  with forms as (select bitrix_sync.crm_contract_forms() as f)
  select jsonb_build_object(
    'confirmed', m.passed_at is not null,
    'confirmed_at', m.passed_at,
    'last_pass_at', l.passed_at,
    'forms', forms.f)
    from forms
    left join lateral (select p.passed_at from bitrix_sync.crm_contract_probes p
                        where p.portal_host = lower(p_portal_host) and p.forms = forms.f
                        order by p.passed_at desc limit 1) m on true
    left join lateral (select p.passed_at from bitrix_sync.crm_contract_probes p
                        where p.portal_host = lower(p_portal_host)
                        order by p.passed_at desc limit 1) l on true
$$;
comment on function bitrix_sync.crm_contract_status(text) is
  'Whether a write probe has passed against this portal with the forms the active settings use (confirmed, confirmed_at), the last pass against it with any forms (last_pass_at), and the forms in use. For the status document and an operator.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.crm_contract_status(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'The status document; an operator may ask.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.crm_contract_problem(p_portal_host text) returns text
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select case when (bitrix_sync.crm_contract_status(p_portal_host) ->> 'confirmed')::boolean then null
              else 'crm_contract_unconfirmed' end
$$;
comment on function bitrix_sync.crm_contract_problem(text) is
  'Readiness (§14): crm_contract_unconfirmed until a write probe has passed against this portal with the forms the active settings use (degraded, not failing); null after.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.crm_contract_problem(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Readiness: crm_contract_unconfirmed.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
