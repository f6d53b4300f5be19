-- Hashes over personal data in older forms (src/hash.ts, docs/security.md "The hash key"). The
-- service writes "v3:" HMACs labelled with their field; rows may still hold the v2 form (keyed, not
-- labelled: read as legacy, rewritten when the value is at hand) and the unkeyed form of the time
-- before BITRIX_SYNC_HASH_KEY (plain SHA-256 hex: ten billion +7 phones are tried in minutes). The
-- database cannot compute a keyed hash (the key never leaves the service), so per column:
--   * cleared here, where the next read recomputes the hash and nothing needs the old one: intents'
--     content hashes, snapshots' name and e-mail hashes (to 'cleared': the value before is unknown,
--     which reconciliation does not count as a change), and hashes in the results of finished
--     commands that no running workflow reads any more;
--   * re-keyed by the service where the value is at hand: a snapshot's phone hash against the App's
--     phone (rekey_contact_phones, src/maintenance/rekey.ts) or against the Contact's numbers when the
--     update steps read them (src/workflows/command-io.ts). Cleared instead it would make the user's
--     next phone change append a number rather than overwrite the one bitrix-sync wrote.

create or replace function bitrix_sync.clear_unkeyed_hashes()
returns table (column_name text, cleared bigint)
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_unkeyed constant text := '^[0-9a-f]{64}$';
  v_n bigint;
begin
  -- An intent's content hash is only compared for equality with the next intent's: without it that
  -- intent runs one pass more, which reads the Contact and writes nothing.
  update bitrix_sync.workflow_instances w set content_hash = null where w.content_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'workflow_instances.content_hash'::text, v_n;
  update bitrix_sync.workflow_instances w set held_content_hash = null where w.held_content_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'workflow_instances.held_content_hash'::text, v_n;
  -- Recomputed by the next apply (webhook, reconciliation, a workflow's final read).
  update bitrix_sync.contact_snapshots s set name_hash = 'cleared' where s.name_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'contact_snapshots.name_hash'::text, v_n;
  update bitrix_sync.contact_snapshots s set email_hash = 'cleared' where s.email_hash ~ v_unkeyed;
  get diagnostics v_n = row_count;
  return query select 'contact_snapshots.email_hash'::text, v_n;
  -- Results are history once their workflow has finished (or for alert commands, at once). The
  -- commands of a workflow still running keep theirs: its next step may plan a phone update from
  -- them; retention deletes them after the workflow.
  update bitrix_sync.crm_commands c
     set response = regexp_replace(c.response::text, '"[0-9a-f]{64}"', '"cleared"', 'g')::jsonb
   where c.status in ('succeeded', 'dead_letter') and c.response is not null
     and c.response::text ~ '"[0-9a-f]{64}"'
     and not exists (select 1 from bitrix_sync.workflow_instances w
                      where w.id = c.workflow_id and w.state not in ('succeeded', 'failed', 'cancelled'));
  get diagnostics v_n = row_count;
  return query select 'crm_commands.response'::text, v_n;
end $$;
comment on function bitrix_sync.clear_unkeyed_hashes() is
  'Clears the unkeyed (plain SHA-256) hashes the database holds where the next read recomputes them: intents'' content hashes (null), snapshots'' name and e-mail hashes (''cleared''), hashes in finished commands'' results that no running workflow reads. Snapshots'' phone hashes are re-keyed by the service (rekey_contact_phones). Run once by migration 000029; re-runnable. Returns the rows changed per column.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.clear_unkeyed_hashes()', array[]::text[], array[]::text[], array[]::text[],
   'Run by migration 000029 as the owner: unkeyed hashes cleared where the next read recomputes them.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.rekey_contact_phones(p_contact_ids text[], p_old_hashes text[], p_new_hashes text[])
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer := coalesce(cardinality(p_contact_ids), 0);
  v_changed integer;
begin
  if coalesce(cardinality(p_old_hashes), 0) <> v_n or coalesce(cardinality(p_new_hashes), 0) <> v_n or v_n > 10000 then
    raise exception 'rekey_contact_phones needs three arrays of one length, at most 10000'
      using errcode = 'BS004', hint = 'Pass Contact ID, the hash read and its replacement per snapshot.';
  end if;
  if exists (select 1 from unnest(p_old_hashes, p_new_hashes) i(old_hash, new_hash)
              where i.old_hash is null or i.old_hash !~ '^([0-9a-f]{64}|v2:[A-Za-z0-9_-]{43})$'
                 or (i.new_hash is not null and i.new_hash !~ '^v3:[A-Za-z0-9_-]{43}$')
                 or (i.new_hash is null and i.old_hash !~ '^[0-9a-f]{64}$')) then
    raise exception 'rekey_contact_phones replaces a legacy phone hash by a v3 one, or clears an unkeyed one'
      using errcode = 'BS004', hint = 'Old: 64 hex characters or v2:...; new: v3:..., or null for an unkeyed old one.';
  end if;
  -- Compare and set: a snapshot changed since it was read keeps its new value. A user with a running
  -- workflow is left for that workflow's read of the Contact (it may hold an older read's hashes).
  with input as (
    select * from unnest(p_contact_ids, p_old_hashes, p_new_hashes) i(contact_id, old_hash, new_hash)
  ), changed as (
    update bitrix_sync.contact_snapshots s
       set phone_hash = i.new_hash
      from input i
     where s.contact_id = i.contact_id and s.phone_hash = i.old_hash
       and not exists (select 1 from bitrix_sync.workflow_instances w
                        where w.user_id = s.user_id and w.state not in ('succeeded', 'failed', 'cancelled'))
    returning 1
  )
  select count(*)::integer into v_changed from changed;
  return v_changed;
end $$;
comment on function bitrix_sync.rekey_contact_phones(text[], text[], text[]) is
  'The service re-keys snapshots'' phone hashes in a legacy form (v2, or unkeyed plain SHA-256) where the App''s phone is the number they stand for (new v3 hash), or clears an unkeyed one that matches no phone at hand (null: the next phone change appends). Compare and set per snapshot; users with a running workflow are skipped. BS004 for arrays of different lengths or hashes of the wrong form. Returns how many changed.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.rekey_contact_phones(text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[],
   'The hourly rekey_hashes task: legacy phone hashes of snapshots rewritten under the hash key.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
