-- History that is never deleted (§4, §5.4, §12.3, §17): mappings, settings versions, rebind
-- requests and the cutover record refuse DELETE, whoever runs it. The audit tables of the admin
-- and of drift repairs use the same trigger function beside their own functions.

create or replace function bitrix_sync.tg__forbid_delete() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  raise exception 'rows of %.% are history and are never deleted', tg_table_schema, tg_table_name
    using errcode = 'BS003',
          hint = 'Close or supersede the row through its bitrix_sync function instead.';
end $$;
comment on function bitrix_sync.tg__forbid_delete() is
  'BEFORE DELETE guard for history tables (mapping, settings versions, rebind requests, the cutover). SQLSTATE BS003.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

drop trigger if exists _200_forbid_delete on bitrix_sync.entity_external_mapping;
create trigger _200_forbid_delete before delete on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.entity_external_mapping is 'Mapping history is never deleted (§4).';

drop trigger if exists _200_forbid_delete on bitrix_sync.settings_versions;
create trigger _200_forbid_delete before delete on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.settings_versions is 'Settings audit is never deleted.';

drop trigger if exists _200_forbid_delete on bitrix_sync.rebind_requests;
create trigger _200_forbid_delete before delete on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.rebind_requests is 'Rebind audit is never deleted.';

drop trigger if exists _200_forbid_delete on bitrix_sync.cutover;
create trigger _200_forbid_delete before delete on bitrix_sync.cutover
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.cutover is 'The cutover record is kept: deleting it would close the processing gate.';
