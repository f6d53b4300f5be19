-- Shared helper of schema bitrix_sync: updated_at maintenance.

create or replace function bitrix_sync.tg__set_updated_at() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  new.updated_at := now();
  return new;
end $$;
comment on function bitrix_sync.tg__set_updated_at() is
  'BEFORE UPDATE trigger: stamps updated_at with the transaction time.';
