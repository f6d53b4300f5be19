-- Contact snapshots (§6.4) and CRM-master writes into the App (§3.1, §5.5): what bitrix-sync last
-- wrote into or read from each linked Contact, as hashes, and the App profile update that goes with
-- a read. The profile write runs with han.sync_suppress so it never echoes back as an App intent.

create or replace function bitrix_sync.record_contact_created(
  p_contact_id text, p_user_id uuid, p_name_hash text, p_email_hash text, p_phone_hash text,
  p_citizenship_enum_id text
) returns bitrix_sync.contact_snapshots
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  insert into bitrix_sync.contact_snapshots
    (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, registered,
     last_applied_source, last_applied_at, stale, stale_reason)
  values (p_contact_id, p_user_id, p_name_hash, p_email_hash, p_phone_hash, p_citizenship_enum_id, true,
          'app_create', now(), false, null)
  on conflict (contact_id) do update
    set user_id = excluded.user_id, name_hash = excluded.name_hash, email_hash = excluded.email_hash,
        phone_hash = excluded.phone_hash, citizenship_enum_id = excluded.citizenship_enum_id,
        registered = true, last_applied_source = 'app_create', last_applied_at = now(), stale = false,
        stale_reason = null
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.record_contact_created(text, uuid, text, text, text, text) is
  'Snapshot of what bitrix-sync wrote into a Contact it created (§5.1 step 9, source app_create): hashes only.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_contact_created(text,uuid,text,text,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.record_contact_phone(p_contact_id text, p_user_id uuid, p_phone_hash text)
returns bitrix_sync.contact_snapshots
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  insert into bitrix_sync.contact_snapshots (contact_id, user_id, phone_hash)
  values (p_contact_id, p_user_id, p_phone_hash)
  on conflict (contact_id) do update set phone_hash = excluded.phone_hash, user_id = excluded.user_id
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.record_contact_phone(text, uuid, text) is
  'Notes the hash of the phone bitrix-sync last wrote into a Contact, so the next change overwrites that entry instead of adding one.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.record_contact_phone(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.mark_contact_snapshot_stale(p_contact_id text, p_user_id uuid, p_reason text)
returns bitrix_sync.contact_snapshots
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  perform bitrix_sync._check_code(p_reason);
  insert into bitrix_sync.contact_snapshots (contact_id, user_id, stale, stale_reason)
  values (p_contact_id, p_user_id, true, p_reason)
  on conflict (contact_id) do update set stale = true, stale_reason = excluded.stale_reason
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.mark_contact_snapshot_stale(text, uuid, text) is
  'Marks the App''s copy of a Contact as possibly behind the CRM (e.g. contact_not_found) without clearing any App value.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.mark_contact_snapshot_stale(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync.apply_crm_master_fields(
  p_user_id uuid, p_contact_id text, p_full_name text, p_citizenship text, p_email text,
  p_name_hash text, p_email_hash text, p_citizenship_enum_id text, p_dictionary_loaded_at timestamptz,
  p_registered boolean, p_crm_created_at timestamptz, p_crm_updated_at timestamptz, p_source text,
  p_webhook_received_at timestamptz default null
) returns bitrix_sync.contact_snapshots
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.contact_snapshots;
begin
  if p_source is null or p_source not in ('app_create', 'webhook', 'reconciliation') then
    raise exception 'the source of CRM-master fields is app_create, webhook or reconciliation, not %', p_source
      using errcode = 'BS004', hint = 'Name the path that read the Contact.';
  end if;
  -- An older read than the snapshot changes nothing. The caller checks this first; the check here,
  -- under the snapshot row's lock, also holds when two steps of one transaction (a step group, see
  -- src/db/statement-batcher.ts) read the snapshot before either wrote it.
  select * into v_row from bitrix_sync.contact_snapshots s where s.contact_id = p_contact_id for update;
  if found and p_crm_updated_at < v_row.crm_updated_at then
    return v_row;
  end if;
  -- For the rest of the caller's transaction: the App's trigger records no intent for this write.
  perform set_config('han.sync_suppress', 'true', true);
  update han_app.client_profile
     set full_name = p_full_name, citizenship = p_citizenship, email = p_email,
         source_updated_at = coalesce(p_crm_updated_at, now())
   where user_id = p_user_id;
  insert into bitrix_sync.contact_snapshots
    (contact_id, user_id, name_hash, email_hash, citizenship_enum_id, citizenship_dictionary_loaded_at,
     registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at,
     last_webhook_received_at, last_webhook_source_at, stale, stale_reason)
  values (p_contact_id, p_user_id, p_name_hash, p_email_hash, p_citizenship_enum_id, p_dictionary_loaded_at,
          p_registered, p_crm_created_at, p_crm_updated_at, p_source, now(), p_webhook_received_at,
          case when p_source = 'webhook' then p_crm_updated_at end, false, null)
  on conflict (contact_id) do update
    set user_id = excluded.user_id, name_hash = excluded.name_hash, email_hash = excluded.email_hash,
        citizenship_enum_id = excluded.citizenship_enum_id,
        citizenship_dictionary_loaded_at = coalesce(excluded.citizenship_dictionary_loaded_at,
                                                    bitrix_sync.contact_snapshots.citizenship_dictionary_loaded_at),
        registered = excluded.registered, crm_created_at = excluded.crm_created_at,
        crm_updated_at = excluded.crm_updated_at, last_applied_source = excluded.last_applied_source,
        last_applied_at = now(),
        last_webhook_received_at = coalesce(excluded.last_webhook_received_at,
                                            bitrix_sync.contact_snapshots.last_webhook_received_at),
        -- The CRM time of the state the last processed robot webhook read (§6.4).
        last_webhook_source_at = case when p_source = 'webhook' then p_crm_updated_at
                                      else bitrix_sync.contact_snapshots.last_webhook_source_at end,
        stale = false, stale_reason = null
  returning * into v_row;
  return v_row;
end $$;
comment on function bitrix_sync.apply_crm_master_fields(uuid, text, text, text, text, text, text, text, timestamptz, boolean, timestamptz, timestamptz, text, timestamptz) is
  'Writes a Contact''s CRM-master fields (NAME, citizenship display value, picked email; null clears) into the App profile with han.sync_suppress set for the transaction, and records the snapshot (hashes, enum ID, CRM timestamps, source; for a webhook also when it was received and the CRM time its read found). A read older than the snapshot (p_crm_updated_at before its crm_updated_at) changes nothing and returns the snapshot as it is; the caller checks that first too.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync.apply_crm_master_fields(uuid,text,text,text,text,text,text,text,timestamp with time zone,boolean,timestamp with time zone,timestamp with time zone,text,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots and the CRM-master profile write.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
