-- Personal values as an admin may see them (§15): masked, and compared in the database with the
-- values npm run diagnose read from the live Contact, so that neither the values nor a digest of
-- them leave the database. A digest the caller could reproduce (a SHA-256 salted by the caller, as
-- until migration 000040) is a dictionary key: a masked +7 mobile number falls in about 10^8
-- guesses offline. What is left is a yes/no per field, audited and limited per login.
create or replace function bitrix_sync._mask_pii(p_value text) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
  -- §15: at most the first two and the last two readable characters; short values not at all, and
  -- the length is never shown.
  select case
    when p_value is null then null
    when length(pg_catalog.btrim(p_value)) < 8 then '***'
    else left(pg_catalog.btrim(p_value), 2) || '***' || right(pg_catalog.btrim(p_value), 2)
  end
$$;
comment on function bitrix_sync._mask_pii(text) is
  'Internal: a personal value as an admin may see it (§15): the first two and last two characters around ***, or *** alone for values shorter than 8 characters; null stays null.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._mask_pii(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of explain_user and diagnose_app_values.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.diagnose_app_values(p_user_id uuid, p_crm jsonb)
returns table (field text, masked text, compared integer, same boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp set row_security = off as $$
declare
  v_fields constant text[] := array['phone', 'full_name', 'email', 'citizenship'];
  v_recent integer;
  v_given integer;
begin
  if p_crm is null or jsonb_typeof(p_crm) <> 'object'
     or exists (select 1 from jsonb_each(p_crm) e
                 where e.key <> all (v_fields) or jsonb_typeof(e.value) <> 'array'
                    or jsonb_array_length(e.value) > 20
                    or exists (select 1 from jsonb_array_elements(e.value) x
                                where jsonb_typeof(x) <> 'string' or length(x #>> '{}') > 1000)) then
    raise exception 'the live Contact''s values are an object of phone, full_name, email and citizenship, each an array of at most 20 strings of at most 1000 characters'
      using errcode = 'BS004', hint = 'npm run diagnose passes what it read from the Contact, e.g. {"phone": ["+79991234567"], "full_name": ["Ivan"]}; a field left out is not compared.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id) then
    raise exception 'user % is not an App user', p_user_id
      using errcode = 'BS060', hint = 'Check the id (han_app.user_identity.id); explain_user() shows what bitrix-sync knows of ids the App no longer has.';
  end if;
  -- Each call answers "equal or not" for the values given: guessing a value takes a call per guess.
  -- Audited, and at most 60 calls an hour per login.
  select count(*)::integer into v_recent
    from bitrix_sync.admin_actions a
   where a.action = 'diagnose_app_values' and a.db_user = session_user and a.performed_at > now() - interval '1 hour';
  if v_recent >= 60 then
    raise exception 'this login compared App values 60 times in the last hour: the limit'
      using errcode = 'BS062', hint = 'Wait, or ask another admin; every comparison is audited in bitrix_sync.admin_actions (action diagnose_app_values).';
  end if;
  select coalesce(sum(jsonb_array_length(e.value)), 0)::integer into v_given from jsonb_each(p_crm) e;
  perform bitrix_sync._record_admin_action('diagnose_app_values', null, null, null, null,
    format('npm run diagnose: the App''s values of user %s compared with %s value(s) of the live Contact', p_user_id, v_given),
    session_user);
  -- Normalised as the audit compares them: trimmed; empty is none. Both none is the same.
  return query
  select v.field, bitrix_sync._mask_pii(v.value),
         case when p_crm ? v.field then jsonb_array_length(p_crm -> v.field) end,
         case when not (p_crm ? v.field) then null
              when nullif(btrim(v.value), '') is null then
                not exists (select 1 from jsonb_array_elements_text(p_crm -> v.field) x where nullif(btrim(x), '') is not null)
              else exists (select 1 from jsonb_array_elements_text(p_crm -> v.field) x where btrim(x) = btrim(v.value)) end
    from han_app.user_identity u
    left join han_app.client_profile p on p.user_id = u.id
   cross join lateral (values (1, 'phone', u.phone_number::text), (2, 'full_name', p.full_name), (3, 'email', p.email),
                              (4, 'citizenship', p.citizenship)) v(n, field, value)
   where u.id = p_user_id
   order by v.n;
end $$;
comment on function bitrix_sync.diagnose_app_values(uuid, jsonb) is
  'Admin (npm run diagnose): the App''s phone, name, e-mail and citizenship of one user, masked, each compared in the database with the values the live Contact holds for that field (p_crm: {"phone": [...], "full_name": [...], "email": [...], "citizenship": [...]}, at most 20 strings each; compared: how many were given, same: the App''s value is one of them, both empty counts as the same, null when the field was not given). No digest leaves the database. Audited in admin_actions (the login, the user id, how many values), at most 60 calls an hour per login (BS062). BS004 for values of the wrong shape, BS060 for a user the App does not have.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.diagnose_app_values(uuid,jsonb)', array[]::text[], array['EXECUTE'], array[]::text[],
   'npm run diagnose: the App''s values masked, compared with the live Contact''s in the database (no digest), audited and limited per login.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
