-- Shared helpers of schema bitrix_sync: updated_at maintenance and the raise helper for refused
-- transitions. Error codes: docs/errors.md.

create or replace function bitrix_sync.tg__set_updated_at() returns trigger
language plpgsql as $$
begin
  new.updated_at := now();
  return new;
end $$;
comment on function bitrix_sync.tg__set_updated_at() is
  'BEFORE UPDATE trigger: stamps updated_at with the transaction time.';

create or replace function bitrix_sync._mask(p_value text) returns text
language sql immutable parallel safe as $$
  -- §15: at most the first two and the last two readable characters survive.
  select case
           when p_value is null then null
           when length(p_value) <= 4 then repeat('*', length(p_value))
           else left(p_value, 2) || repeat('*', least(length(p_value) - 4, 8)) || right(p_value, 2)
         end
$$;
comment on function bitrix_sync._mask(text) is
  'Masks a value for alert details: first two and last two characters, the rest as *. Short values are fully masked.';
