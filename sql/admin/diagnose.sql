-- Personal values as an admin may see them (§15): masked, or as salted digests npm run diagnose
-- compares with the live Contact without the database handing the values out.

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

create or replace function bitrix_sync.diagnose_app_values(p_user_id uuid, p_salt text)
returns table (field text, masked text, digest text)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_salt is null or length(p_salt) < 16 then
    raise exception 'a salt of at least 16 characters is required'
      using errcode = 'BS004', hint = 'npm run diagnose draws a random one per run; digests are comparable only within that run.';
  end if;
  if not exists (select 1 from han_app.user_identity u where u.id = p_user_id) then
    raise exception 'user % is not an App user', p_user_id
      using errcode = 'BS060', hint = 'Check the id (han_app.user_identity.id); explain_user() shows what bitrix-sync knows of ids the App no longer has.';
  end if;
  -- What the audit compares, normalised the same way (trimmed; empty is none), salted so that the
  -- digests mean nothing outside this call.
  return query
  select v.field, bitrix_sync._mask_pii(v.value),
         case when nullif(btrim(v.value), '') is null then null
              else encode(sha256(convert_to(p_salt || btrim(v.value), 'UTF8')), 'hex') end
    from han_app.user_identity u
    left join han_app.client_profile p on p.user_id = u.id
   cross join lateral (values ('phone', u.phone_number::text), ('full_name', p.full_name), ('email', p.email),
                              ('citizenship', p.citizenship)) v(field, value)
   where u.id = p_user_id;
end $$;
comment on function bitrix_sync.diagnose_app_values(uuid, text) is
  'Admin (npm run diagnose): the App''s phone, name, e-mail and citizenship of one user, masked, each with a SHA-256 digest salted with p_salt (at least 16 characters) so the script can say whether the live Contact holds the same value without the database handing it out. BS060 for a user the App does not have.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.diagnose_app_values(uuid,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'npm run diagnose: the App''s values masked with salted digests.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
