-- Hot settings (§12.3): a database without a settings version starts from the catalogue's defaults.

-- A fresh database starts from the catalogue defaults as version 1.
do $$
declare
  v_version integer;
begin
  if not exists (select 1 from bitrix_sync.settings_versions) then
    v_version := bitrix_sync.propose_settings('{}'::jsonb, 'migration', 'catalogue defaults');
    perform bitrix_sync.validate_settings_version(v_version);
    perform bitrix_sync.activate_settings_version(v_version, 'migration');
  end if;
end $$;
