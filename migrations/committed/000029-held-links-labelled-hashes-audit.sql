--! Previous: sha1:3b671ef44515fcb992a3f4de65f3da5657dee106
--! Hash: sha1:9be0180f4cd22af95cca9eb30c116b6eae4b2f5f
--! Message: held-links-labelled-hashes-audit

-- Findings of a security review: the CRM-master fields held back after a link made by phone alone
-- (mapping.hold_after_phone_link), hashes over personal data labelled with their field (v3) and the
-- unkeyed ones cleared or left to the service to re-key, the login behind every audited admin action,
-- the grants drift check widened to role memberships and to roles outside the catalogue.
set local lock_timeout = '10s';

------------------------------------------------------------------------------------------------
-- A link made by phone alone (B1.1, B2.1) trusts the App's phone number. With the hot setting
-- mapping.hold_after_phone_link on, the Contact's CRM-master fields are held back from the App until
-- a robot webhook reports a CRM change made after the link, or an admin confirms
-- (sql/held_links.sql). The hold is the link's: recorded on its mapping row, ended with it.
------------------------------------------------------------------------------------------------
alter table bitrix_sync.entity_external_mapping
  add column if not exists held_at timestamptz,
  add column if not exists held_crm_updated_at timestamptz,
  add column if not exists hold_released_at timestamptz,
  add column if not exists hold_released_by varchar(16);
-- Every existing row has the four columns null: the check holds without a scan worth the name, and
-- the table holds one row per link made (thousands, not millions).
alter table bitrix_sync.entity_external_mapping drop constraint if exists entity_external_mapping_hold;
-- squawk-ignore constraint-missing-not-valid
alter table bitrix_sync.entity_external_mapping add constraint entity_external_mapping_hold
  check ((hold_released_at is null) = (hold_released_by is null)
         and (hold_released_at is null or held_at is not null)
         and (held_crm_updated_at is null or held_at is not null)
         and (hold_released_by is null or hold_released_by::text = any ('{robot_webhook,admin}'::text[])));
-- New columns, no row has a value yet: the index builds instantly.
-- squawk-ignore require-concurrent-index-creation
create index if not exists entity_external_mapping_held_idx on bitrix_sync.entity_external_mapping (held_at)
  where status = 'active' and held_at is not null and hold_released_at is null;
comment on column bitrix_sync.entity_external_mapping.held_at is
  'Set when the link was made by phone alone (B1.1, B2.1) while mapping.hold_after_phone_link was on: the Contact''s CRM-master fields are held back from the App until the hold is released. Null: never held.';
comment on column bitrix_sync.entity_external_mapping.held_crm_updated_at is
  'The Contact''s updatedTime at the first read after the link (the service''s own write of the user id included): a robot webhook releases the hold only when its read shows a newer one.';
comment on column bitrix_sync.entity_external_mapping.hold_released_at is
  'When the hold ended: the CRM-master fields were applied from then on. Null while held or never held.';
comment on column bitrix_sync.entity_external_mapping.hold_released_by is
  'robot_webhook (a robot webhook reported a CRM change after the link) | admin (confirm_phone_link; who and why in admin_actions).';

------------------------------------------------------------------------------------------------
-- The database login (session_user) beside every self-declared operator name. Nullable and without
-- a value for existing rows: who ran them was not recorded, and the migration's own login would be
-- a false record. Rows inserted from now on take session_user from the column default (inside a
-- security definer function too: session_user is the login, whatever role the function runs as);
-- the functions that resolve, validate, activate or cancel write it themselves.
------------------------------------------------------------------------------------------------
alter table bitrix_sync.rebind_requests
  add column if not exists requested_db_user varchar(128),
  add column if not exists cancelled_db_user varchar(128);
alter table bitrix_sync.rebind_requests alter column requested_db_user set default session_user;
comment on column bitrix_sync.rebind_requests.requested_db_user is
  'The database login (session_user) that called request_bitrix_contact_rebind(); operator_id is the name it declared. Null for requests recorded before this column existed.';
comment on column bitrix_sync.rebind_requests.cancelled_db_user is
  'The database login (session_user) that called cancel_rebind_request(); cancelled_by is the name it declared.';

alter table bitrix_sync.settings_versions
  add column if not exists created_db_user varchar(128),
  add column if not exists validated_db_user varchar(128),
  add column if not exists activated_db_user varchar(128);
alter table bitrix_sync.settings_versions alter column created_db_user set default session_user;
comment on column bitrix_sync.settings_versions.created_db_user is
  'The database login (session_user) that proposed the version (propose_settings, rollback_settings); created_by is the name it declared. Null for versions recorded before this column existed.';
comment on column bitrix_sync.settings_versions.validated_db_user is
  'The database login (session_user) that validated (or rejected) the version.';
comment on column bitrix_sync.settings_versions.activated_db_user is
  'The database login (session_user) that activated the version; activated_by is the name it declared.';

alter table bitrix_sync.cutover add column if not exists performed_db_user varchar(128);
alter table bitrix_sync.cutover alter column performed_db_user set default session_user;
comment on column bitrix_sync.cutover.performed_db_user is
  'The database login (session_user) that ran perform_cutover(); performed_by is the name it declared. Null for a cutover recorded before this column existed.';

alter table bitrix_sync.technical_dead_letters add column if not exists resolved_db_user varchar(128);
comment on column bitrix_sync.technical_dead_letters.resolved_db_user is
  'The database login (session_user) that acknowledged or requeued the dead letter; resolved_by is the name it declared.';

------------------------------------------------------------------------------------------------
-- Hashes (src/hash.ts, sql/hashes.sql): the service writes "v3:" HMACs labelled with their field and
-- reads v2 and plain SHA-256 as legacy. The unkeyed ones the database holds are cleared here where
-- the next read recomputes them; snapshots' phone hashes are re-keyed by the service (task
-- rekey_hashes).
------------------------------------------------------------------------------------------------
comment on column bitrix_sync.contact_snapshots.name_hash is
  'Keyed hash of NAME as applied: "v3:" HMAC-SHA256 over "name", NUL and the value; "v2:..." (unlabelled) in rows written before 000029, read as legacy; ''cleared'' where an unkeyed hash was cleared (unknown until the next apply). No value copies.';
comment on column bitrix_sync.contact_snapshots.email_hash is
  'Keyed hash of the e-mail as applied: "v3:" HMAC-SHA256 over "email", NUL and the value; "v2:..." (unlabelled) in rows written before 000029, read as legacy; ''cleared'' where an unkeyed hash was cleared. No value copies.';
comment on column bitrix_sync.contact_snapshots.phone_hash is
  'Keyed hash of the phone bitrix-sync last wrote into the Contact (the entry the next change overwrites): "v3:" HMAC-SHA256 over "phone", NUL and the value; older forms (v2, plain SHA-256) are re-keyed by the service.';
comment on column bitrix_sync.workflow_instances.content_hash is
  'Keyed hash of the desired App-master content ("v3:" HMAC-SHA256 over "content", NUL and the JSON; v2 in older rows; null where an unkeyed one was cleared); equal content skips a pass.';

-- >>> sql/hashes.sql (included)
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
-- <<< sql/hashes.sql
select * from bitrix_sync.clear_unkeyed_hashes();

-- >>> sql/settings.sql (included)
-- Hot settings (§12.3): a typed catalogue, versions with validation status and audit, activation of
-- validated versions only, rollback, and a NOTIFY so workers reload.

-- Every key has bounds (the table's CHECK settings_bounded): integers and numbers a range (integers
-- within int4, so every consumer reads them as int4), text a maximum length, enums their values, the
-- json object its allowed entries and the maximum length of each value.
insert into bitrix_sync.settings (key, value_type, default_value, min_value, max_value, allowed_values, max_length, nullable, description)
values
  ('alerts.category_id', 'integer', null, 0, 2147483647, null, null, true, 'Smart-process category (pipeline) ID of the alert process.'),
  ('alerts.entity_type_id', 'integer', null, 128, 2147483647, null, null, true, 'entityTypeId of the "sync conflicts" smart process; required before alerts reach the CRM.'),
  ('alerts.fields', 'json', '{}', null, null, '["alert_number", "candidate_contact_ids", "correlation_id", "current_contact_id", "details", "fingerprint", "first_occurred_at", "last_occurred_at", "occurrence_count", "previous_alert_number", "selected_contact_id", "severity", "type", "user_id"]', 64, false, 'Smart-process field names (ufCrm<type>_...) by logical alert field: alert_number, fingerprint, type, severity, user, contacts, details, counts, dates, previous link, correlation. alert_number (or fingerprint) is what an unanswered alert.add is looked up by.'),
  ('alerts.reconcile_interval_sec', 'integer', '3600', 60, 86400, null, null, false, 'How often open alerts are polled (§10.3).'),
  ('alerts.responsible_id', 'integer', null, 1, 2147483647, null, null, true, 'Bitrix24 user ID responsible for new alert items.'),
  ('alerts.sla_hours', 'integer', '24', 1, 720, null, null, false, 'Resolution SLA of an alert in calendar hours from its first occurrence (nights, weekends and holidays count); 24 by default.'),
  ('alerts.stage_closed_without_resolution', 'text', null, null, null, null, 64, true, 'Terminal stage ID: closed without resolution.'),
  ('alerts.stage_in_progress', 'text', null, null, null, null, 64, true, 'Stage ID: in progress.'),
  ('alerts.stage_new', 'text', null, null, null, null, 64, true, 'Stage ID for new alerts.'),
  ('alerts.stage_resolved', 'text', null, null, null, null, 64, true, 'Terminal stage ID: resolved.'),
  ('batch.max_wait_ms', 'integer', '200', 1, 60000, null, null, false, 'Flush a partial batch after this wait (§8).'),
  ('batch.size', 'integer', '20', 1, 50, null, null, false, 'Commands per Bitrix24 batch request (§8: 1..50).'),
  ('citizenship.cache_ttl_sec', 'integer', '3600', 10, 604800, null, null, false, 'TTL of the citizenship dictionary cache (§3.3).'),
  ('claim.size', 'integer', '50', 1, 1000, null, null, false, 'Rows claimed from a queue per round trip.'),
  ('health.crm_stale_sec', 'integer', '300', 30, 86400, null, null, false, 'Readiness says degraded (crm_stale) when the CRM has had no success for this long while failures arrive (§14).'),
  ('lease.ttl_sec', 'integer', '60', 5, 3600, null, null, false, 'Lease length for queue rows, workflows, commands and webhooks.'),
  ('limiter.burst', 'integer', '5', 1, 250, null, null, false, 'Token bucket capacity (requests).'),
  ('limiter.max_in_flight', 'integer', '2', 1, 50, null, null, false, 'HTTP requests to the portal in flight at once, all replicas together (§8).'),
  ('limiter.refill_per_sec', 'number', '2', 0.01, 50, null, null, false, 'Token bucket refill rate, requests per second (§8: 2 until the plan is confirmed).'),
  ('mapping.hold_after_phone_link', 'boolean', 'false', null, null, null, null, false, 'After a link made by phone alone (B1.1, B2.1), hold the Contact''s name, e-mail and citizenship back from the App until a robot webhook reports a CRM change made after the link or an admin confirms (confirm_phone_link). Off: applied at once, which trusts that the App verifies phone numbers.'),
  ('reconcile.contacts_interval_sec', 'integer', '900', 60, 86400, null, null, false, 'Incremental Contact reconciliation interval (§10.2: 15 min).'),
  ('reconcile.lease_sec', 'integer', '600', 60, 86400, null, null, false, 'A reconciliation run still marked running after this long is taken to have died: the next claim starts a new run.'),
  ('reconcile.opened_filter', 'enum', '"Y"', null, null, '["Y", "N", "1", "0"]', null, false, 'Value sent for the opened filter of crm.item.list; the reference documents Y/N for system booleans.'),
  ('reconcile.overlap_sec', 'integer', '120', 0, 3600, null, null, false, 'Overlap re-read below the watermark.'),
  ('reconcile.recovered_spike_ratio', 'number', '0.2', 0, 1, null, null, false, 'Ops alert when recovered-without-webhook / changed exceeds this share.'),
  ('reconcile.recovered_spike_threshold', 'integer', '20', 1, 100000, null, null, false, 'Ops alert when a run recovers at least this many Contacts without a webhook and more than twice the baseline.'),
  ('retention.batch_size', 'integer', '500', 10, 5000, null, null, false, 'Rows deleted per retention transaction; each batch is its own short transaction.'),
  ('retention.commands_days', 'integer', '30', 1, 3650, null, null, false, 'Finished CRM commands (succeeded, dead-lettered) are deleted this many days after they finished; at most retention.workflows_days.'),
  ('retention.enabled', 'boolean', 'true', null, null, null, null, false, 'Whether the hourly retention task deletes finished rows.'),
  ('retention.queue_days', 'integer', '30', 1, 3650, null, null, false, 'Finished han_app.sync_queue rows (processed, cancelled, dead-lettered) are deleted this many days after they finished.'),
  ('retention.run_budget_sec', 'integer', '60', 1, 3000, null, null, false, 'A retention run stops starting new batches after this long; the next run goes on.'),
  ('retention.webhooks_days', 'integer', '7', 1, 3650, null, null, false, 'Processed (and coalesced) webhook inbox rows are deleted this many days after they were processed.'),
  ('retention.workflows_days', 'integer', '90', 1, 3650, null, null, false, 'Finished workflows are deleted this many days after they finished, once their commands are gone.'),
  ('retry.base_ms', 'integer', '1000', 10, 600000, null, null, false, 'Backoff base (full jitter, §9).'),
  ('retry.horizon_sec', 'integer', '86400', 60, 604800, null, null, false, 'Retry horizon from the first attempt (§9: 24 h).'),
  ('retry.max_ms', 'integer', '300000', 100, 86400000, null, null, false, 'Backoff cap.'),
  ('worker.poll_interval_ms', 'integer', '2000', 100, 5000, null, null, false, 'Fallback poll when no NOTIFY arrives (§8: at most 5 s).')
on conflict (key) do update
  set value_type = excluded.value_type, default_value = excluded.default_value, min_value = excluded.min_value,
      max_value = excluded.max_value, allowed_values = excluded.allowed_values, max_length = excluded.max_length,
      nullable = excluded.nullable, description = excluded.description;

create or replace function bitrix_sync._settings_errors(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_def bitrix_sync.settings;
  v_val jsonb;
  v_errors jsonb := '[]'::jsonb;
  v_key text;
  v_num numeric;
  v_entry record;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return '["values must be a JSON object"]'::jsonb;
  end if;
  for v_key in select k from jsonb_object_keys(p_values) k where k not in (select s.key from bitrix_sync.settings s) loop
    v_errors := v_errors || to_jsonb(format('%s: unknown setting', v_key));
  end loop;
  for v_def in select * from bitrix_sync.settings order by key loop
    v_val := coalesce(p_values -> v_def.key, v_def.default_value, 'null'::jsonb);
    if jsonb_typeof(v_val) = 'null' then
      if not v_def.nullable then
        v_errors := v_errors || to_jsonb(format('%s: a value is required', v_def.key));
      end if;
      continue;
    end if;
    case v_def.value_type
      when 'integer', 'number' then
        if jsonb_typeof(v_val) <> 'number' then
          v_errors := v_errors || to_jsonb(format('%s: must be a number', v_def.key));
          continue;
        end if;
        v_num := (v_val #>> '{}')::numeric;
        -- 1036.0 and 1.0360e3 are whole numbers: stored as 1036 (_normalise_settings).
        if v_def.value_type = 'integer' and v_num <> trunc(v_num) then
          v_errors := v_errors || to_jsonb(format('%s: must be a whole number', v_def.key));
        end if;
        -- Every number has both bounds (CHECK settings_bounded); an integer's lie within int4.
        if v_num < v_def.min_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at least %s', v_def.key, v_def.min_value));
        end if;
        if v_num > v_def.max_value then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s', v_def.key, v_def.max_value));
        end if;
      when 'text' then
        if jsonb_typeof(v_val) <> 'string' or length(v_val #>> '{}') = 0 then
          v_errors := v_errors || to_jsonb(format('%s: must be a non-empty string', v_def.key));
        elsif length(v_val #>> '{}') > v_def.max_length then
          v_errors := v_errors || to_jsonb(format('%s: must be at most %s characters', v_def.key, v_def.max_length));
        end if;
      when 'boolean' then
        if jsonb_typeof(v_val) <> 'boolean' then
          v_errors := v_errors || to_jsonb(format('%s: must be true or false', v_def.key));
        end if;
      when 'enum' then
        if not (v_def.allowed_values @> jsonb_build_array(v_val)) then
          v_errors := v_errors || to_jsonb(format('%s: must be one of %s', v_def.key, v_def.allowed_values));
        end if;
      when 'json' then
        if jsonb_typeof(v_val) <> 'object' then
          v_errors := v_errors || to_jsonb(format('%s: must be a JSON object', v_def.key));
          continue;
        end if;
        -- An object of allowed entries, each a non-empty string of at most max_length characters.
        for v_entry in select e.key, e.value from jsonb_each(v_val) e order by e.key loop
          if not (v_def.allowed_values @> jsonb_build_array(v_entry.key)) then
            v_errors := v_errors || to_jsonb(format('%s: unknown entry %s (allowed: %s)', v_def.key,
                                                    left(v_entry.key, 64), v_def.allowed_values));
          elsif jsonb_typeof(v_entry.value) <> 'string' or length(v_entry.value #>> '{}') = 0
                or length(v_entry.value #>> '{}') > v_def.max_length then
            v_errors := v_errors || to_jsonb(format('%s: entry %s must be a non-empty string of at most %s characters',
                                                    v_def.key, v_entry.key, v_def.max_length));
          end if;
        end loop;
    end case;
  end loop;
  -- Cross-field rules.
  if coalesce((p_values ->> 'retry.base_ms')::numeric, 1000) > coalesce((p_values ->> 'retry.max_ms')::numeric, 300000) then
    v_errors := v_errors || to_jsonb('retry.base_ms: must not exceed retry.max_ms'::text);
  end if;
  -- A workflow is deleted only after its commands, so commands cannot be kept longer.
  if coalesce((p_values ->> 'retention.commands_days')::numeric, 30)
     > coalesce((p_values ->> 'retention.workflows_days')::numeric, 90) then
    v_errors := v_errors || to_jsonb('retention.commands_days: must not exceed retention.workflows_days'::text);
  end if;
  return v_errors;
exception
  when invalid_text_representation or numeric_value_out_of_range then
    return v_errors || to_jsonb('values: a number could not be read'::text);
end $$;
comment on function bitrix_sync._settings_errors(jsonb) is
  'Validation messages for a complete settings object against the catalogue (types, bounds, maximum lengths, allowed values and entries, cross-field rules); empty array when valid.';

create or replace function bitrix_sync._normalise_settings(p_values jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_out jsonb := p_values;
  v_def record;
  v_num numeric;
begin
  if p_values is null or jsonb_typeof(p_values) <> 'object' then
    return p_values;
  end if;
  -- jsonb keeps a number's written scale: 1036.0 stays 1036.0, and a reader's ::integer cast of
  -- it fails. Whole numbers of integer keys are stored the way int4 prints them.
  for v_def in select s.key from bitrix_sync.settings s
                where s.value_type = 'integer' and jsonb_typeof(p_values -> s.key) = 'number' loop
    v_num := (p_values ->> v_def.key)::numeric;
    if v_num = trunc(v_num) and v_num between -2147483648 and 2147483647 then
      v_out := jsonb_set(v_out, array[v_def.key], to_jsonb(v_num::integer));
    end if;
  end loop;
  return v_out;
end $$;
comment on function bitrix_sync._normalise_settings(jsonb) is
  'Internal: the values with every whole number of an integer key written as int4 prints it (1036.0 and 1.0360e3 -> 1036); anything else unchanged, for _settings_errors to judge.';

create or replace function bitrix_sync.propose_settings(p_changes jsonb, p_actor text, p_note text default null)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_base bitrix_sync.settings_versions;
  v_version integer;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'settings changes need an actor for the audit'
      using errcode = 'BS004', hint = 'Pass who you are, e.g. ''ops:ivanov''.';
  end if;
  if p_changes is null or jsonb_typeof(p_changes) <> 'object' then
    raise exception 'settings changes must be a JSON object of key -> value'
      using errcode = 'BS008', hint = 'Example: ''{"batch.size": 25}''::jsonb';
  end if;
  select * into v_base from bitrix_sync.settings_versions where status = 'active';
  insert into bitrix_sync.settings_versions (settings_values, based_on, note, created_by)
  values (bitrix_sync._normalise_settings(coalesce(v_base.settings_values, '{}'::jsonb) || p_changes), v_base.version,
          p_note, btrim(p_actor))
  returning version into v_version;
  return v_version;
end $$;
comment on function bitrix_sync.propose_settings(jsonb, text, text) is
  'Creates a draft version: the active values with p_changes applied, whole numbers of integer keys normalised (1036.0 -> 1036); created_by is the declared actor, created_db_user the login (session_user). Validate, then activate it.';

create or replace function bitrix_sync.validate_settings_version(p_version integer)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
  v_values jsonb;
  v_errors jsonb;
begin
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'draft' then
    raise exception 'settings version % is %, only drafts are validated', p_version, v_row.status
      using errcode = 'BS002', hint = 'Propose a new version with propose_settings().';
  end if;
  -- A draft written without propose_settings() is normalised here, in its last change as a draft.
  v_values := bitrix_sync._normalise_settings(v_row.settings_values);
  v_errors := bitrix_sync._settings_errors(v_values);
  update bitrix_sync.settings_versions
     set settings_values = v_values,
         status = case when jsonb_array_length(v_errors) = 0 then 'validated' else 'rejected' end,
         validation_errors = case when jsonb_array_length(v_errors) = 0 then null else v_errors end,
         validated_at = now(), validated_db_user = session_user
   where version = p_version;
  return v_errors;
end $$;
comment on function bitrix_sync.validate_settings_version(integer) is
  'draft -> validated, or -> rejected with the reasons (returned and stored); the values are normalised in the same change, and the login (session_user) is recorded in validated_db_user. A rejected version can never be activated.';

create or replace function bitrix_sync.activate_settings_version(p_version integer, p_actor text)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.settings_versions;
begin
  if p_actor is null or length(btrim(p_actor)) = 0 then
    raise exception 'activation needs an actor for the audit' using errcode = 'BS004', hint = 'Pass who you are.';
  end if;
  select * into v_row from bitrix_sync.settings_versions where version = p_version for update;
  if not found then
    raise exception 'settings version % does not exist', p_version using errcode = 'BS005', hint = 'See bitrix_sync.settings_versions.';
  end if;
  if v_row.status <> 'validated' then
    raise exception 'settings version % is %; only a validated version can be activated', p_version, v_row.status
      using errcode = 'BS008',
            hint = case when v_row.status = 'draft' then 'Run validate_settings_version() first.'
                        when v_row.status = 'rejected' then 'Fix the values listed in validation_errors and propose a new version.'
                        else 'To return to an earlier version use rollback_settings().' end;
  end if;
  -- Revalidate: the catalogue may have changed since validation.
  if jsonb_array_length(bitrix_sync._settings_errors(v_row.settings_values)) > 0 then
    raise exception 'settings version % no longer validates against the catalogue', p_version
      using errcode = 'BS008', hint = 'Propose a new version.';
  end if;
  update bitrix_sync.settings_versions set status = 'superseded', superseded_at = now() where status = 'active';
  update bitrix_sync.settings_versions
     set status = 'active', activated_by = btrim(p_actor), activated_db_user = session_user, activated_at = now()
   where version = p_version
  returning * into v_row;
  perform pg_notify('bitrix_sync_settings', v_row.version::text);
  return v_row;
end $$;
comment on function bitrix_sync.activate_settings_version(integer, text) is
  'validated -> active; the previous active version becomes superseded. Records who (the declared actor and the login, session_user) and when, and NOTIFYs bitrix_sync_settings.';

create or replace function bitrix_sync.rollback_settings(p_to_version integer, p_actor text, p_note text default null)
returns bitrix_sync.settings_versions
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_old bitrix_sync.settings_versions;
  v_version integer;
  v_errors jsonb;
begin
  select * into v_old from bitrix_sync.settings_versions where version = p_to_version;
  if not found or v_old.status not in ('superseded', 'active') then
    raise exception 'settings version % was never active; rollback returns to a version that was', p_to_version
      using errcode = 'BS008', hint = 'Pick a superseded version from bitrix_sync.settings_versions.';
  end if;
  insert into bitrix_sync.settings_versions (settings_values, based_on, rollback_of, note, created_by)
  values (v_old.settings_values,
          (select version from bitrix_sync.settings_versions where status = 'active'),
          p_to_version, coalesce(p_note, format('rollback to version %s', p_to_version)), coalesce(btrim(p_actor), ''))
  returning version into v_version;
  v_errors := bitrix_sync.validate_settings_version(v_version);
  if jsonb_array_length(v_errors) > 0 then
    raise exception 'version % does not validate against today''s catalogue: %', p_to_version, v_errors
      using errcode = 'BS008', hint = 'Propose corrected values instead of a rollback.';
  end if;
  return bitrix_sync.activate_settings_version(v_version, p_actor);
end $$;
comment on function bitrix_sync.rollback_settings(integer, text, text) is
  'Activates a new version carrying the values of an earlier active version (rollback_of records which); history stays linear.';

create or replace function bitrix_sync.active_settings() returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select jsonb_object_agg(s.key, coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb))
           || jsonb_build_object('_version', v.version)
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   group by v.version
$$;
comment on function bitrix_sync.active_settings() is
  'The active version''s values with catalogue defaults filled in, plus _version. What workers read and cache.';

create or replace function bitrix_sync._active_setting(p_key text) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_value jsonb;
begin
  select coalesce(v.settings_values -> s.key, s.default_value, 'null'::jsonb) into v_value
    from bitrix_sync.settings s
    left join bitrix_sync.settings_versions v on v.status = 'active'
   where s.key = p_key;
  if not found then
    -- A typo here would silently disable whatever rule reads the setting.
    raise exception 'setting % is not in the catalogue', p_key
      using errcode = 'BS004', hint = 'The keys are the rows of bitrix_sync.settings.';
  end if;
  return v_value;
end $$;
comment on function bitrix_sync._active_setting(text) is
  'One key of the active settings version, the catalogue default filled in (JSON null when unset and nullable). What SQL rules read; an unknown key raises BS004.';

create or replace function bitrix_sync.alert_entity_type_id() returns integer
language plpgsql stable as $$
declare
  v_value jsonb := bitrix_sync._active_setting('alerts.entity_type_id');
  v_num numeric;
begin
  if jsonb_typeof(v_value) = 'null' then
    return null;
  end if;
  if jsonb_typeof(v_value) = 'number' then
    v_num := (v_value #>> '{}')::numeric;
    -- A version activated before the int4 bound and the normalisation may hold 1036.0 or 3e9.
    if v_num = trunc(v_num) and v_num between 1 and 2147483647 then
      return v_num::integer;
    end if;
  end if;
  raise exception 'alerts.entity_type_id of the active settings is not a usable entityTypeId'
    using errcode = 'BS023',
          hint = 'Propose the smart process''s entityTypeId as a whole number, e.g. propose_settings(''{"alerts.entity_type_id": 1036}'', ...), then validate and activate it.';
end $$;
comment on function bitrix_sync.alert_entity_type_id() is
  'The alert smart process''s entityTypeId from the active settings as int4, null when unset; BS023 when the active value is not a whole number in 1..2^31-1. What accept_webhooks() and readiness read.';

create or replace function bitrix_sync.alert_config_problem() returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_active jsonb;
begin
  begin
    if bitrix_sync.alert_entity_type_id() is null then
      return null; -- alerts are not configured: the alert receiver answers receiver_not_configured
    end if;
  exception when others then
    return 'alert_config_invalid';
  end;
  -- Configured: every alerts.* value must still pass today's catalogue (an older active version
  -- may predate a bound).
  v_active := bitrix_sync.active_settings() - '_version';
  if exists (select 1 from jsonb_array_elements_text(bitrix_sync._settings_errors(v_active)) e
              where e like 'alerts.%') then
    return 'alert_config_invalid';
  end if;
  return null;
end $$;
comment on function bitrix_sync.alert_config_problem() is
  'Readiness (§14): alert_config_invalid when alerts.entity_type_id is set but alerts cannot work with the active settings (the entity type is not a usable int4, or an alerts.* value fails today''s catalogue); null otherwise. Names no value.';

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
-- <<< sql/settings.sql
-- >>> sql/held_links.sql (included)
-- Links made by phone alone (§5.1 B1.1, B2.1; docs/workflows.md "Links made by phone alone"): such
-- a link rests on the App's phone number only. If the App does not verify phone numbers, whoever
-- signs up with someone else's number is linked to that person's Contact, and the final read copies
-- the Contact's name, e-mail and citizenship into their profile. With the hot setting
-- mapping.hold_after_phone_link on, the link is made (the Contact gets the user id, the mapping is
-- active) but the CRM-master fields are held back from the App until
--   * a robot webhook for the Contact reports a change made in the CRM after the link (its read
--     shows a newer updatedTime than the first read after the link, which already includes the
--     service's own write of the user id: the robot call that write causes releases nothing), or
--   * an admin confirms (confirm_phone_link), which also queues a read of the Contact.
-- Then the fields are applied as for any link, so nothing is lost. Reconciliation and the workflows'
-- reads apply nothing while a link is held. A link found through the user id the Contact carries
-- (§4), one to a Contact bitrix-sync created, one a person chose (a parked workflow's link_contact, a
-- rebind) is not made by phone alone and is not held; except that a link found through a user id
-- that an earlier, still held link of the same user and Contact wrote keeps that hold
-- (keep_phone_link_hold): a deactivation and a return must not turn a phone into proof. The hold is the link's: a link closed (deactivation, rebind, a missing
-- Contact) ends it, and a new link by phone is held anew. Turning the setting off holds no new link
-- and keeps the holds already recorded until they are released.

create or replace function bitrix_sync.hold_phone_link(p_user_id uuid, p_contact_id text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_held boolean;
begin
  if not coalesce((bitrix_sync._active_setting('mapping.hold_after_phone_link') #>> '{}')::boolean, false) then
    return false;
  end if;
  update bitrix_sync.entity_external_mapping m
     set held_at = now()
   where m.entity_id = p_user_id and m.external_id = p_contact_id and m.status = 'active' and m.held_at is null
  returning true into v_held;
  return coalesce(v_held, false);
end $$;
comment on function bitrix_sync.hold_phone_link(uuid, text) is
  'Called right after a link made by phone alone (B1.1, B2.1) is opened: records the hold (held_at) on the user''s active mapping of that Contact when mapping.hold_after_phone_link is on. Returns whether the link is held now.';

create or replace function bitrix_sync.keep_phone_link_hold(p_user_id uuid, p_contact_id text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_held boolean;
begin
  -- The Contact carries this user's id only because an earlier link of the same pair, made by phone
  -- alone, wrote it; that link closed (a deactivation, say) while still held. The user id is no more
  -- proof than the phone was: the new link keeps the hold, whatever the setting says now.
  if not exists (
       select 1 from bitrix_sync.entity_external_mapping p
        where p.id = (select l.id from bitrix_sync.entity_external_mapping l
                       where l.entity_id = p_user_id and l.external_id = p_contact_id and l.status <> 'active'
                       order by l.opened_at desc limit 1)
          and p.held_at is not null and p.hold_released_at is null) then
    return false;
  end if;
  update bitrix_sync.entity_external_mapping m
     set held_at = now()
   where m.entity_id = p_user_id and m.external_id = p_contact_id and m.status = 'active' and m.held_at is null
  returning true into v_held;
  return coalesce(v_held, false);
end $$;
comment on function bitrix_sync.keep_phone_link_hold(uuid, text) is
  'Called right after a link found through the user id the Contact carries (§4 restore, the previous link''s Contact): when the latest earlier link of the same user and Contact was held and never released, the new link is held too (the user id was written on the strength of the phone alone). Returns whether the link is held now.';

create or replace function bitrix_sync.held_link_read(
  p_mapping_id uuid, p_crm_updated_at timestamptz, p_robot_webhook boolean
) returns text
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
begin
  select * into v_row from bitrix_sync.entity_external_mapping m where m.id = p_mapping_id for update;
  if not found or v_row.status <> 'active' or v_row.held_at is null or v_row.hold_released_at is not null then
    return 'not_held';
  end if;
  if v_row.held_crm_updated_at is null then
    -- The first read after the link: what a later robot webhook has to be newer than.
    update bitrix_sync.entity_external_mapping m
       set held_crm_updated_at = coalesce(p_crm_updated_at, now())
     where m.id = p_mapping_id;
    return 'held';
  end if;
  if p_robot_webhook and p_crm_updated_at > v_row.held_crm_updated_at then
    update bitrix_sync.entity_external_mapping m
       set hold_released_at = now(), hold_released_by = 'robot_webhook'
     where m.id = p_mapping_id;
    return 'released';
  end if;
  return 'held';
end $$;
comment on function bitrix_sync.held_link_read(uuid, timestamptz, boolean) is
  'A read of a linked Contact meets its mapping''s hold: not_held (apply as usual); held (apply nothing; the first read after the link records the Contact''s updatedTime); released (p_robot_webhook and the Contact changed after that first read: the hold ends, apply now).';

create or replace function bitrix_sync.confirm_phone_link(p_user_id uuid, p_reason text, p_operator_id text)
returns table (mapping_id uuid, inbox_id bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp as $$
declare
  v_row bitrix_sync.entity_external_mapping;
  v_inbox bigint;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_row from bitrix_sync.entity_external_mapping m
   where m.entity_type = 'user' and m.entity_id = p_user_id and m.status = 'active'
   for update;
  if not found then
    raise exception 'this user has no active link to a Contact'
      using errcode = 'BS005',
            hint = 'Check the user id; only an active link can be held. Held links: select * from bitrix_sync.held_phone_links;';
  end if;
  if v_row.held_at is null or v_row.hold_released_at is not null then
    raise exception 'this user''s link is not held: its CRM-master fields are applied already'
      using errcode = 'BS002',
            hint = 'Nothing to confirm. Held links: select * from bitrix_sync.held_phone_links;';
  end if;
  update bitrix_sync.entity_external_mapping m
     set hold_released_at = now(), hold_released_by = 'admin'
   where m.id = v_row.id;
  perform bitrix_sync._record_admin_action('confirm_phone_link', v_row.workflow_id, null, null, v_row.external_id,
                                           p_reason, p_operator_id);
  -- The fields follow through the webhooks lane: a read of the Contact, applied as a robot call's.
  select a.inbox_id into v_inbox
    from bitrix_sync.accept_webhooks(array['contact'], array[3], array[v_row.external_id::text], array[null::inet]) a;
  return query select v_row.id, v_inbox;
end $$;
comment on function bitrix_sync.confirm_phone_link(uuid, text, text) is
  'Admin (docs/admin.md "Held phone links"): releases the hold of a user''s link made by phone alone (hold_released_by admin), audited in admin_actions with the operator''s reason and the login, and queues a read of the Contact (an inbox row) that applies its CRM-master fields to the App. BS004 missing reason or operator, BS005 no active link, BS002 the link is not held.';

create or replace view bitrix_sync.status_held_links as
select count(*)::bigint as count,
       coalesce(extract(epoch from now() - min(m.held_at)), 0)::bigint as oldest_age_sec
  from bitrix_sync.entity_external_mapping m
 where m.status = 'active' and m.held_at is not null and m.hold_released_at is null;
comment on view bitrix_sync.status_held_links is
  'Status (§14): active links made by phone alone whose CRM-master fields are held back (mapping.hold_after_phone_link), with the oldest hold''s age. Counts only.';

create or replace view bitrix_sync.held_phone_links as
select m.id as mapping_id, m.workflow_id, m.held_at,
       extract(epoch from now() - m.held_at)::bigint as age_sec,
       m.held_crm_updated_at is not null as read_seen
  from bitrix_sync.entity_external_mapping m
 where m.status = 'active' and m.held_at is not null and m.hold_released_at is null;
comment on view bitrix_sync.held_phone_links is
  'Held links as an admin looks at them (docs/admin.md): the mapping and the workflow that made it, since when, and whether the Contact has been read since the link (read_seen). No user or Contact IDs; confirm_phone_link takes the user id.';
-- <<< sql/held_links.sql
-- >>> sql/metrics.sql (included)
-- Metrics (§15): what /metrics reads from the database in one call at scrape time, and the counting
-- of state transitions where they happen, in the transaction that makes them. Counts, ages and
-- low-cardinality labels only (types, states, receivers, sources, safe codes): never a user or
-- Contact ID, a phone, an e-mail or a fingerprint. src/observability/metrics.ts turns the rows into
-- Prometheus families; docs/observability.md lists them.
--
-- Why the transition counters live here: most transitions happen inside SQL (claims, the wake-up of
-- a workflow when its command completes, coalescing, dead-lettering), where no lane sees the old
-- state. An AFTER trigger appends one row per transition to bitrix_sync.metric_events; nothing is
-- updated in place, so two writers never wait on each other and a rolled-back transition is never
-- counted. metrics_snapshot() folds the appended rows into bitrix_sync.metric_event_totals, so the
-- counters survive restarts and every replica reports the same totals.

create or replace function bitrix_sync.tg_workflow_instances__count_transition() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('workflow', new.workflow_type, old.state, new.state);
  return null;
end $$;
comment on function bitrix_sync.tg_workflow_instances__count_transition() is
  'AFTER UPDATE OF state trigger: appends one workflow transition (type, from, to) to metric_events for bitrix_sync_workflow_transitions_total. Security definer: whoever moves the workflow, nobody needs rights on the table.';

drop trigger if exists _900_count_transition on bitrix_sync.workflow_instances;
create trigger _900_count_transition after update of state on bitrix_sync.workflow_instances
  for each row when (old.state is distinct from new.state)
  execute function bitrix_sync.tg_workflow_instances__count_transition();
comment on trigger _900_count_transition on bitrix_sync.workflow_instances is
  'Counts each committed workflow transition for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.tg_crm_commands__count_transition() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('command', new.command_type, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_crm_commands__count_transition() is
  'AFTER UPDATE OF status trigger: appends one command transition (type, from, to) to metric_events for bitrix_sync_command_transitions_total.';

drop trigger if exists _900_count_transition on bitrix_sync.crm_commands;
create trigger _900_count_transition after update of status on bitrix_sync.crm_commands
  for each row when (old.status is distinct from new.status)
  execute function bitrix_sync.tg_crm_commands__count_transition();
comment on trigger _900_count_transition on bitrix_sync.crm_commands is
  'Counts each committed command transition for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.tg_webhook_inbox__count_coalesced() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('webhook', new.receiver, old.status, new.status);
  return null;
end $$;
comment on function bitrix_sync.tg_webhook_inbox__count_coalesced() is
  'AFTER UPDATE OF status trigger: appends one event coalesced into another (claim_webhooks) to metric_events for bitrix_sync_webhook_coalesced_total.';

drop trigger if exists _900_count_coalesced on bitrix_sync.webhook_inbox;
create trigger _900_count_coalesced after update of status on bitrix_sync.webhook_inbox
  for each row when (new.status = 'coalesced' and old.status is distinct from new.status)
  execute function bitrix_sync.tg_webhook_inbox__count_coalesced();
comment on trigger _900_count_coalesced on bitrix_sync.webhook_inbox is
  'Counts webhook events covered by another event''s read (received -> coalesced) for /metrics.';

create or replace function bitrix_sync.tg_technical_dead_letters__count() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  insert into bitrix_sync.metric_events (machine, kind, from_state, to_state)
  values ('dead_letter', new.source, '', 'dead_letter');
  return null;
end $$;
comment on function bitrix_sync.tg_technical_dead_letters__count() is
  'AFTER INSERT trigger: appends one new technical dead letter (by source) to metric_events for bitrix_sync_dead_letters_total.';

drop trigger if exists _900_count_dead_letter on bitrix_sync.technical_dead_letters;
create trigger _900_count_dead_letter after insert on bitrix_sync.technical_dead_letters
  for each row execute function bitrix_sync.tg_technical_dead_letters__count();
comment on trigger _900_count_dead_letter on bitrix_sync.technical_dead_letters is
  'Counts each new technical dead letter for /metrics (bitrix_sync.metric_events).';

create or replace function bitrix_sync.metrics_snapshot(p_bucket text default null, p_check_mappings boolean default false)
returns table (family text, labels jsonb, value double precision)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_burst double precision := (bitrix_sync._active_setting('limiter.burst') #>> '{}')::double precision;
  v_refill double precision := (bitrix_sync._active_setting('limiter.refill_per_sec') #>> '{}')::double precision;
begin
  -- Fold what the triggers appended since the last scrape. One scrape folds at a time; another
  -- scrape meanwhile reads the totals plus the rows not folded yet, which gives the same sums.
  if pg_try_advisory_xact_lock(hashtext('bitrix_sync.metric_events')) then
    with moved as (
      delete from bitrix_sync.metric_events e returning e.machine, e.kind, e.from_state, e.to_state
    )
    insert into bitrix_sync.metric_event_totals as t (machine, kind, from_state, to_state, count)
    select m.machine, m.kind, m.from_state, m.to_state, count(*) from moved m group by 1, 2, 3, 4
    on conflict (machine, kind, from_state, to_state) do update set count = t.count + excluded.count;
  end if;

  return query
  -- Live states only: each filter reaches the status view's scan (its grouping column), so no
  -- finished row is read.
  with queue as (
    select q.status, q.count, q.oldest_age_sec from bitrix_sync.status_queue q
     where q.status in ('pending', 'leased', 'retry_wait')
  ), queue_all as (
    -- Every live status always present (0 when empty), so "older than" alerts have a series.
    select s.status, coalesce(q.count, 0) as count, coalesce(q.oldest_age_sec, 0) as oldest_age_sec
      from unnest(array['pending', 'leased', 'retry_wait']) s(status) left join queue q on q.status = s.status
  ), workflows as (
    select w.workflow_type, w.state, w.count, w.oldest_age_sec from bitrix_sync.status_workflows w
     where w.state in ('created', 'running', 'waiting_crm', 'waiting_retry', 'waiting_manual')
  ), commands as (
    select c.command_type, c.status, c.count, c.oldest_age_sec from bitrix_sync.status_commands c
     where c.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')
  ), inbox as (
    select h.receiver, h.status, h.count, h.oldest_age_sec from bitrix_sync.status_webhooks h
     where h.status in ('received', 'coalesced', 'processing', 'retry_wait')
  ), dead as (
    select d.source, d.operation, d.error_code, d.count, d.oldest_age_sec from bitrix_sync.status_dead_letters d
  ), alerts as (
    select a.alert_type, a.severity, a.open_count, a.sla_overdue from bitrix_sync.status_alerts a
  ), mirror as (
    -- Alerts whose smart-process item is behind; both statuses always present (0 when none).
    select s.status, coalesce(m.count, 0) as count
      from unnest(array['pending', 'failed']) s(status)
      left join bitrix_sync.status_alert_mirror m on m.mirror_status = s.status
  ), events as (
    -- The folded totals plus whatever a concurrent scrape has not folded yet.
    select e.machine, e.kind, e.from_state, e.to_state, sum(e.n) as n
      from (select t.machine, t.kind, t.from_state, t.to_state, t.count as n from bitrix_sync.metric_event_totals t
            union all
            select p.machine, p.kind, p.from_state, p.to_state, 1 from bitrix_sync.metric_events p) e
     group by e.machine, e.kind, e.from_state, e.to_state
  )
  select 'bitrix_sync_queue_depth', jsonb_build_object('status', q.status), q.count::float8 from queue_all q
  union all
  select 'bitrix_sync_queue_oldest_age_seconds', jsonb_build_object('status', q.status), q.oldest_age_sec::float8
    from queue_all q
  union all
  select 'bitrix_sync_workflows_active', jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state),
         w.count::float8 from workflows w
  union all
  select 'bitrix_sync_workflows_oldest_age_seconds',
         jsonb_build_object('workflow_type', w.workflow_type, 'state', w.state), w.oldest_age_sec::float8 from workflows w
  union all
  select 'bitrix_sync_crm_commands', jsonb_build_object('command_type', c.command_type, 'status', c.status),
         c.count::float8 from commands c
  union all
  select 'bitrix_sync_crm_commands_oldest_age_seconds',
         jsonb_build_object('command_type', c.command_type, 'status', c.status), c.oldest_age_sec::float8 from commands c
  union all
  select 'bitrix_sync_webhook_inbox', jsonb_build_object('receiver', h.receiver, 'status', h.status), h.count::float8
    from inbox h
  union all
  select 'bitrix_sync_webhook_inbox_oldest_age_seconds', jsonb_build_object('receiver', h.receiver, 'status', h.status),
         h.oldest_age_sec::float8 from inbox h
  union all
  select 'bitrix_sync_dead_letters_open',
         jsonb_build_object('source', d.source, 'operation', d.operation, 'code', d.error_code), d.count::float8 from dead d
  union all
  select 'bitrix_sync_dead_letters_oldest_age_seconds', jsonb_build_object('source', d.source),
         max(d.oldest_age_sec)::float8 from dead d group by d.source
  union all
  select 'bitrix_sync_business_alerts_open', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.open_count::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_sla_overdue', jsonb_build_object('alert_type', a.alert_type, 'severity', a.severity),
         a.sla_overdue::float8 from alerts a
  union all
  select 'bitrix_sync_business_alerts_unmirrored', jsonb_build_object('mirror_status', m.status), m.count::float8
    from mirror m
  union all
  -- A pass over the active mappings: the service asks for it at most once a minute.
  select 'bitrix_sync_mapping_invariant_violations', '{}'::jsonb, count(*)::float8
    from bitrix_sync.entity_external_mapping m
    join han_app.user_identity u on u.id = m.entity_id
   where p_check_mappings and m.status = 'active' and u.record_status <> 'active'
  having p_check_mappings
  union all
  -- Links made by phone alone whose CRM-master fields are held back (always present, 0 when none).
  select 'bitrix_sync_phone_links_held', '{}'::jsonb, h.count::float8 from bitrix_sync.status_held_links h
  union all
  select 'bitrix_sync_phone_links_held_oldest_age_seconds', '{}'::jsonb, h.oldest_age_sec::float8
    from bitrix_sync.status_held_links h
  union all
  select 'bitrix_sync_reconciliation_cursor_lag_seconds', jsonb_build_object('job_type', r.job_type),
         greatest(0, extract(epoch from now() - r.watermark))::float8
    from bitrix_sync.reconciliation_cursors r
   where r.watermark is not null
  union all
  select l.family, '{}'::jsonb, l.value
    from bitrix_sync.crm_rate_buckets b
   cross join lateral (values
     -- Refilled to now at the stored rate factor, as the next acquire_crm_request() would see it.
     ('bitrix_sync_limiter_tokens',
      least(v_burst, b.tokens + v_refill * b.rate_factor * greatest(0, extract(epoch from clock_timestamp() - b.refilled_at)))),
     ('bitrix_sync_limiter_rate_factor', b.rate_factor),
     ('bitrix_sync_limiter_throttled_seconds',
      greatest(0, coalesce(extract(epoch from b.throttled_until - clock_timestamp()), 0))::float8),
     ('bitrix_sync_limiter_in_flight',
      (select count(*) from bitrix_sync.crm_inflight_slots s
        where s.bucket = b.bucket and s.expires_at > clock_timestamp())::float8),
     ('bitrix_sync_limiter_blocked_methods',
      (select count(*) from bitrix_sync.crm_method_blocks m
        where m.bucket = b.bucket and m.blocked_until > clock_timestamp())::float8)
   ) l(family, value)
   where b.bucket = p_bucket
  union all
  select 'bitrix_sync_workflow_transitions_total',
         jsonb_build_object('workflow_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'workflow'
  union all
  select 'bitrix_sync_command_transitions_total',
         jsonb_build_object('command_type', e.kind, 'from', e.from_state, 'to', e.to_state), e.n::float8
    from events e where e.machine = 'command'
  union all
  -- Present from the start for every receiver and source (0 before the first event), so increase()
  -- sees the first one.
  select 'bitrix_sync_webhook_coalesced_total', jsonb_build_object('receiver', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'webhook' and e.kind = k.kind), 0)::float8
    from unnest(array['contact', 'alert']) k(kind)
  union all
  select 'bitrix_sync_dead_letters_total', jsonb_build_object('source', k.kind),
         coalesce((select sum(e.n) from events e where e.machine = 'dead_letter' and e.kind = k.kind), 0)::float8
    from unnest(array['sync_queue', 'workflow', 'crm_command', 'webhook']) k(kind);
end $$;
comment on function bitrix_sync.metrics_snapshot(text, boolean) is
  'Every database-derived Prometheus sample for GET /metrics in one call: queue, workflow, command and inbox depths and oldest ages (live states), open dead letters, business alerts, links held after a phone-only link, reconciliation cursor lag, the limiter bucket p_bucket, and the transition counters (folded from metric_events first). p_check_mappings adds the mapping invariant count (a pass over the active mappings). Rows: (family, labels, value); labels are low-cardinality only.';
-- <<< sql/metrics.sql
-- >>> sql/rebind_admin.sql (included)
-- Rebind requests for the admin (§5.4, docs/admin.md "Rebind"): watch a request without reading
-- personal data, and cancel an open one with a reason. A cancel stops its workflow and records what
-- the CRM already holds in the request's outcome: the CRM is never left changed without a record.

create or replace view bitrix_sync.rebind_request_status as
select r.id as request_id, r.status, r.failure_code, r.outcome, r.operator_id, r.requested_at, r.completed_at,
       r.cancelled_by, w.id as workflow_id, w.state as workflow_state, w.current_step,
       w.last_error_code as workflow_error_code, w.held_intent_type,
       extract(epoch from coalesce(r.completed_at, now()) - r.requested_at)::bigint as age_sec,
       r.requested_db_user, r.cancelled_db_user
  from bitrix_sync.rebind_requests r
  left join bitrix_sync.workflow_instances w on w.id = r.workflow_id;
comment on view bitrix_sync.rebind_request_status is
  'Rebind requests as an admin watches them: status, failure code, what the CRM holds (outcome), who asked and who cancelled (the declared operator and the database login, session_user), and where the workflow is (state, step, error code, an App change held until it ends). No user or Contact IDs and no reason text.';

create or replace function bitrix_sync.cancel_rebind_request(p_request_id uuid, p_reason text, p_operator_id text)
returns table (request_id uuid, status text, outcome text, workflow_id uuid, workflow_state text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_req bitrix_sync.rebind_requests;
  v_wf bitrix_sync.workflow_instances;
  v_outcome text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator_id);
  select * into v_req from bitrix_sync.rebind_requests r where r.id = p_request_id for update;
  if not found then
    raise exception 'there is no rebind request %', p_request_id
      using errcode = 'BS005',
            hint = 'The id is what request_bitrix_contact_rebind returned; open ones: select * from bitrix_sync.rebind_request_status where status in (''requested'', ''in_progress'').';
  end if;
  if v_req.status not in ('requested', 'in_progress') then
    raise exception 'rebind request % is already %', p_request_id, v_req.status
      using errcode = 'BS002',
            hint = 'A finished request stays finished; its outcome column says what the CRM holds.';
  end if;
  select * into v_wf from bitrix_sync.workflow_instances w where w.id = v_req.workflow_id for update;
  -- A write on its way to the portal has no known outcome yet: wait for its reply (or for its lease
  -- to expire, which records it as uncertain) so that the outcome recorded below is exact.
  perform 1 from bitrix_sync.crm_commands c
   where c.workflow_id = v_req.workflow_id and c.alert_id is null and c.status = 'in_flight'
     and bitrix_sync._is_write_command(c.command_type)
   for update;
  if found then
    raise exception 'a CRM write of rebind request % is on its way to the portal right now', p_request_id
      using errcode = 'BS007',
            hint = 'Try again in a few seconds: once its reply (or its lease expiry) is recorded, the cancel records exactly what the CRM holds.';
  end if;

  perform bitrix_sync._abandon_workflow_commands(v_req.workflow_id, 'rebind_cancelled');
  v_outcome := bitrix_sync._rebind_crm_outcome(v_req.workflow_id);
  update bitrix_sync.rebind_requests r
     set status = 'cancelled', outcome = v_outcome, cancel_reason = btrim(p_reason),
         cancelled_by = btrim(p_operator_id), cancelled_db_user = session_user, completed_at = now()
   where r.id = p_request_id
  returning * into v_req;
  -- The workflow stops here, whoever holds its lease: a step still running is refused at its next
  -- fenced call (BS001). An App change held during the rebind starts now, on the old link.
  if v_wf.state not in ('succeeded', 'failed', 'cancelled') then
    update bitrix_sync.workflow_instances w
       set state = 'cancelled', outcome = 'rebind_cancelled', lease_token = null, locked_by = null,
           locked_until = null, finished_at = now()
     where w.id = v_wf.id
    returning * into v_wf;
  end if;
  perform bitrix_sync._record_admin_action('cancel_rebind_request', v_wf.id, p_request_id, null, null,
                                           p_reason, p_operator_id);
  if v_outcome <> 'crm_unchanged' then
    raise notice 'the CRM was already changed: %', v_outcome
      using hint = 'docs/admin.md (Rebind, outcomes) says what each outcome leaves in the CRM and what to check there.';
  end if;
  return query select v_req.id, v_req.status::text, v_req.outcome::text, v_wf.id, v_wf.state::text;
end $$;
comment on function bitrix_sync.cancel_rebind_request(uuid, text, text) is
  'Admin (docs/admin.md): requested | in_progress -> cancelled with the operator''s reason, audited. Closes the workflow''s unsent and unresolved commands, cancels the workflow (a held App change then starts) and records in outcome what the CRM already holds. BS004 missing audit field, BS005 unknown request, BS002 already finished, BS007 a write is in flight right now.';

-- Privileges: sql/privileges.sql (the admin role executes the functions and reads the views;
-- the runtime and the App have nothing here).
-- <<< sql/rebind_admin.sql
-- >>> sql/dead_letters.sql (included)
-- Technical dead letters an admin can act on (§9, issue 11; recipes in docs/admin.md). Each function
-- is security definer with a pinned search_path, runs as bitrix_sync_admin only, records who and why
-- on the dead letter itself and in admin_actions in the same transaction, and refuses with a
-- SQLSTATE, a sentence and a HINT that says what to do instead:
--   list_dead_letters        what is open (or everything), with what a requeue would do or why not;
--   acknowledge_dead_letter  looked at, nothing re-sent: the entry leaves the open-DLQ gauge;
--   requeue_dead_letter      a new, fenced attempt through the normal state machine:
--     sync_queue  a new pending intent row with the same task, user and payload (fresh horizon);
--     webhook     a new inbox event for the same entity (event_type requeue; fresh horizon);
--     workflow / a workflow's crm_command
--                 the failed workflow starts over from its first step (failed -> waiting_retry,
--                 requeue): every step reads again and issues its command as a new row, so a write
--                 is never re-sent blindly; its horizon counts from the requeue;
--     an alert's crm_command
--                 the alert is mirrored again (crm_sync_status failed -> pending): a new command,
--                 preceded by a lookup when an earlier add may have created the item.
-- Entries that one restart covers (the same workflow, the same alert) are resolved together.

create or replace function bitrix_sync._open_dead_letter(p_id bigint) returns bitrix_sync.technical_dead_letters
language plpgsql as $$
declare
  v_row bitrix_sync.technical_dead_letters;
begin
  select * into v_row from bitrix_sync.technical_dead_letters where id = p_id for update;
  if not found then
    raise exception 'technical dead letter % does not exist', p_id
      using errcode = 'BS040', hint = 'List them with: select * from bitrix_sync.list_dead_letters();';
  end if;
  if v_row.resolved_at is not null then
    raise exception 'technical dead letter % was already % by % at %', p_id, v_row.resolution, v_row.resolved_by,
                    to_char(v_row.resolved_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
      using errcode = 'BS041',
            hint = case when v_row.resolution = 'requeued'
                        then format('Its new attempt is %s; follow that instead.', v_row.requeued_to)
                        else 'Nothing to do: a resolved dead letter stays resolved.' end;
  end if;
  return v_row;
end $$;
comment on function bitrix_sync._open_dead_letter(bigint) is
  'Internal: the open dead letter, locked; BS040 when there is none with that id, BS041 when it is already resolved.';

create or replace function bitrix_sync._requeue_refusal(p_dl bitrix_sync.technical_dead_letters) returns jsonb
language plpgsql stable as $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_wf bitrix_sync.workflow_instances;
  v_cmd bitrix_sync.crm_commands;
  v_alert bitrix_sync.business_alerts;
  v_newer text;
  v_ack constant text := 'If nothing needs to run again, acknowledge it: select * from bitrix_sync.acknowledge_dead_letter(<id>, ''ops:<you>'', ''<why>'');';
begin
  if p_dl.source = 'sync_queue' then
    if p_dl.source_id ~ '^[0-9a-f-]{36}$' then
      select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid;
    end if;
    if v_q.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent row no longer exists', 'hint', v_ack);
    elsif v_q.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its intent row is %s, not dead_letter', v_q.status), 'hint', v_ack);
    elsif v_q.task_type not in ('contact.map_or_create', 'contact.update', 'contact.deactivate', 'contact.rebind') then
      return jsonb_build_object('code', 'BS042', 'message', 'its intent is of a task type the service does not run', 'hint', v_ack);
    elsif exists (select 1 from han_app.sync_queue a
                   where a.dedup_key = v_q.dedup_key and a.status in ('pending', 'leased', 'retry_wait')) then
      return jsonb_build_object('code', 'BS042', 'message', 'a newer intent of the same kind for the same user is queued and carries this one', 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.source = 'webhook' then
    if p_dl.source_id ~ '^[0-9]{1,18}$' then
      select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint;
    end if;
    if v_hook.id is null then
      return jsonb_build_object('code', 'BS042', 'message', 'its inbox event no longer exists', 'hint', v_ack);
    elsif v_hook.status <> 'dead_letter' then
      return jsonb_build_object('code', 'BS042', 'message', format('its inbox event is %s, not dead_letter', v_hook.status), 'hint', v_ack);
    end if;
    return null;
  end if;

  if p_dl.workflow_id is not null then
    select * into v_wf from bitrix_sync.workflow_instances where id = p_dl.workflow_id;
    if not found then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow no longer exists', 'hint', v_ack);
    elsif v_wf.state in ('succeeded', 'cancelled') then
      return jsonb_build_object('code', 'BS042', 'message', format('its workflow finished as %s without it', v_wf.state), 'hint', v_ack);
    elsif v_wf.state <> 'failed' then
      return jsonb_build_object('code', 'BS043',
        'message', format('its workflow is still %s: its own retries, or an admin''s decision on a parked workflow, move it on', v_wf.state),
        'hint', 'Wait until the workflow has failed or finished (bitrix_sync.status_workflows), then requeue or acknowledge.');
    end if;
    select w.state into v_newer from bitrix_sync.workflow_instances w
     where w.user_id = v_wf.user_id and w.created_at > v_wf.created_at and w.id <> v_wf.id
     order by w.created_at desc limit 1;
    if v_newer in ('succeeded', 'failed', 'cancelled') then
      return jsonb_build_object('code', 'BS042',
        'message', 'a newer workflow of the same user has run since; running this older one again could undo it',
        'hint', v_ack);
    elsif v_newer is not null then
      return jsonb_build_object('code', 'BS043', 'message', 'a newer workflow of the same user is running',
        'hint', 'Wait until it finishes; it reads the user''s current data, so it usually makes this dead letter moot. Then acknowledge or requeue.');
    end if;
    if v_wf.workflow_type = 'contact.rebind' and not exists (
         select 1 from bitrix_sync.rebind_requests r
          where r.workflow_id = v_wf.id and r.status in ('requested', 'in_progress')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its rebind request is finished; a rebind is not run again by a requeue',
        'hint', 'Ask again with select bitrix_sync.request_bitrix_contact_rebind(''<user uuid>'', ''<Contact ID>'', ''<why>'', ''ops:<you>''); then acknowledge this dead letter.');
    end if;
    if exists (select 1 from bitrix_sync.crm_commands c
                where c.workflow_id = v_wf.id and c.status in ('uncertain', 'reconcile')) then
      return jsonb_build_object('code', 'BS042', 'message', 'its workflow has a write whose outcome is still unknown',
        'hint', v_ack);
    end if;
    return null;
  end if;

  -- A command of a business alert.
  select * into v_cmd from bitrix_sync.crm_commands where id = p_dl.command_id;
  if not found or v_cmd.alert_id is null then
    return jsonb_build_object('code', 'BS042', 'message', 'its command no longer exists', 'hint', v_ack);
  end if;
  select * into v_alert from bitrix_sync.business_alerts where id = v_cmd.alert_id;
  if v_alert.status = 'remote_missing' then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert''s smart-process item was deleted in the CRM', 'hint', v_ack);
  end if;
  if exists (select 1 from bitrix_sync.crm_commands n
              where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list'
                and n.status in ('pending', 'leased', 'in_flight', 'retry_wait', 'uncertain', 'reconcile')) then
    return jsonb_build_object('code', 'BS043', 'message', 'a newer command of the same alert is under way',
      'hint', 'Wait for it (bitrix_sync.status_alert_mirror); if it succeeds, acknowledge this dead letter.');
  end if;
  if v_alert.crm_sync_status = 'synced' and exists (
       select 1 from bitrix_sync.crm_commands n
        where n.alert_id = v_alert.id and n.id > v_cmd.id and n.command_type <> 'alert.list' and n.status = 'succeeded') then
    return jsonb_build_object('code', 'BS042', 'message', 'the alert has been mirrored since', 'hint', v_ack);
  end if;
  return null;
end $$;
comment on function bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters) is
  'Internal: why a dead letter cannot be requeued now, as {code, message, hint} (BS042 nothing to run again, BS043 something else is running), or null when it can.';

create or replace function bitrix_sync._requeue_target(p_dl bitrix_sync.technical_dead_letters) returns text
language plpgsql as $$
declare
  v_q han_app.sync_queue;
  v_hook bitrix_sync.webhook_inbox;
  v_id text;
  v_alert bigint;
begin
  if p_dl.source = 'sync_queue' then
    select * into v_q from han_app.sync_queue where id = p_dl.source_id::uuid for update;
    -- The same intent as a new row: created now, so its horizon and the cutover watermark count from now.
    insert into han_app.sync_queue (task_type, entity_type, entity_id, dedup_key, payload_json)
    values (v_q.task_type, v_q.entity_type, v_q.entity_id, v_q.dedup_key, v_q.payload_json)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_queue', v_q.task_type);
    return 'sync_queue:' || v_id;
  end if;

  if p_dl.source = 'webhook' then
    select * into v_hook from bitrix_sync.webhook_inbox where id = p_dl.source_id::bigint for update;
    insert into bitrix_sync.webhook_inbox (receiver, event_type, entity_type_id, entity_id)
    values (v_hook.receiver, 'requeue', v_hook.entity_type_id, v_hook.entity_id)
    returning id::text into v_id;
    perform pg_notify('bitrix_sync_webhooks', v_hook.receiver);
    return 'webhook:' || v_id;
  end if;

  if p_dl.workflow_id is not null then
    -- failed -> waiting_retry (requeue): due now, from its first step, with a horizon of its own.
    update bitrix_sync.workflow_instances
       set state = 'waiting_retry', current_step = 'start', step_data = '{}'::jsonb, outcome = null,
           last_error_code = null, finished_at = null, requeued_at = now(), next_attempt_at = now(),
           attempt_count = 0, deadline_at = bitrix_sync._retry_deadline(now()),
           lease_token = null, locked_by = null, locked_until = null
     where id = p_dl.workflow_id and state = 'failed';
    perform pg_notify('bitrix_sync_workflows', '');
    return 'workflow:' || p_dl.workflow_id::text;
  end if;

  select c.alert_id into v_alert from bitrix_sync.crm_commands c where c.id = p_dl.command_id;
  -- The mirror sends the alert's current state again; an add that may have landed is looked up first.
  update bitrix_sync.business_alerts set crm_sync_status = 'pending'
   where id = v_alert and crm_sync_status <> 'pending';
  perform pg_notify('bitrix_sync_workflows', '');
  return 'alert:' || v_alert::text;
end $$;
comment on function bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters) is
  'Internal (requeue_dead_letter, after _requeue_refusal said yes): starts the new attempt and returns what carries it (sync_queue:<id>, webhook:<id>, workflow:<id>, alert:<id>).';

create or replace function bitrix_sync._covered_dead_letters(p_dl bitrix_sync.technical_dead_letters) returns bigint[]
language sql stable as $$
  -- The open entries one new attempt answers: the workflow's, or the alert's, or just this one.
  select coalesce(array_agg(d.id order by d.id), array[p_dl.id])
    from bitrix_sync.technical_dead_letters d
   where d.resolved_at is null
     and (d.id = p_dl.id
          or (p_dl.workflow_id is not null and d.workflow_id = p_dl.workflow_id)
          or (p_dl.source = 'crm_command' and p_dl.workflow_id is null and d.source = 'crm_command'
              and d.command_id in (select c.id from bitrix_sync.crm_commands c
                                    where c.alert_id = (select x.alert_id from bitrix_sync.crm_commands x
                                                         where x.id = p_dl.command_id))))
$$;
comment on function bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters) is
  'Internal: the ids of the open dead letters a requeue of p_dl answers: every open entry of its workflow, or of its alert''s commands, or p_dl alone.';

-- The login that resolved an entry (resolved_db_user) joined the result's columns: a result type
-- changes only through a drop, done once (sql/grants.sql grants EXECUTE again at the end).
do $$
begin
  if exists (select 1 from pg_proc p
              where p.oid = 'bitrix_sync.list_dead_letters(boolean, integer)'::regprocedure
                and not ('resolved_db_user' = any (p.proargnames))) then
    drop function bitrix_sync.list_dead_letters(boolean, integer);
  end if;
exception when undefined_function then
  null;
end $$;

create or replace function bitrix_sync.list_dead_letters(p_include_resolved boolean default false, p_limit integer default 100)
returns table (
  id bigint, source text, operation text, error_code text, http_status integer, bitrix_error text,
  attempt_count integer, first_attempt_at timestamptz, deadline_at timestamptz, created_at timestamptz,
  age_sec bigint, source_id text, workflow_id uuid, command_id bigint, workflow_type text, workflow_state text,
  requeue text, resolution text, resolved_at timestamptz, resolved_by text, requeued_to text,
  resolved_db_user text
)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_limit is null or p_limit not between 1 and 10000 then
    raise exception 'the limit must be between 1 and 10000, got %', p_limit
      using errcode = 'BS004', hint = 'Example: select * from bitrix_sync.list_dead_letters(false, 500);';
  end if;
  return query
  select d.id, d.source::text, d.operation::text, d.error_code::text, d.http_status, d.bitrix_error::text,
         d.attempt_count, d.first_attempt_at, d.deadline_at, d.created_at,
         extract(epoch from now() - d.created_at)::bigint, d.source_id::text, d.workflow_id, d.command_id,
         w.workflow_type::text, w.state::text,
         case when d.resolved_at is not null then null
              when r.why is null then 'ready'
              else (r.why ->> 'code') || ': ' || (r.why ->> 'message') end,
         d.resolution::text, d.resolved_at, d.resolved_by::text, d.requeued_to::text, d.resolved_db_user::text
    from bitrix_sync.technical_dead_letters d
    left join bitrix_sync.workflow_instances w on w.id = d.workflow_id
    left join lateral (select bitrix_sync._requeue_refusal(d) as why) r on d.resolved_at is null
   where d.id in (select x.id from bitrix_sync.technical_dead_letters x
                   where p_include_resolved or x.resolved_at is null
                   order by x.id desc
                   limit p_limit)
   order by d.id;
end $$;
comment on function bitrix_sync.list_dead_letters(boolean, integer) is
  'Admin (§9): the newest p_limit technical dead letters, open ones only unless p_include_resolved, oldest first, with safe columns (codes, counts, times, internal ids, who resolved it: the declared operator and the login; the reasons are in admin_actions), the state of their workflow, and `requeue`: ready, or the SQLSTATE and sentence a requeue would refuse with now.';

create or replace function bitrix_sync._resolve_dead_letters(
  p_ids bigint[], p_resolution text, p_operator text, p_reason text, p_target text
) returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language sql
set search_path = pg_catalog, pg_temp as $$
  with resolved as (
    update bitrix_sync.technical_dead_letters d
       set resolved_at = now(), resolved_by = btrim(p_operator), resolved_db_user = session_user,
           resolution = p_resolution, resolution_reason = btrim(p_reason), requeued_to = p_target
     where d.id = any(p_ids) and d.resolved_at is null
    returning d.*
  ), audit as (
    -- One audit row per entry, with the admin functions' others (docs/admin.md).
    insert into bitrix_sync.admin_actions (action, workflow_id, dead_letter_id, reason, operator_id)
    select case p_resolution when 'requeued' then 'requeue_dead_letter' else 'acknowledge_dead_letter' end,
           r.workflow_id, r.id, btrim(p_reason), btrim(p_operator)
      from resolved r
  )
  select r.id, r.source::text, r.operation::text, r.resolution::text, r.requeued_to::text, r.resolved_at,
         r.resolved_by::text
    from resolved r
   order by r.id
$$;
comment on function bitrix_sync._resolve_dead_letters(bigint[], text, text, text, text) is
  'Internal: marks open dead letters resolved with the resolution, operator, login (session_user), reason and (requeued) target, and writes an admin_actions row for each; returns them.';

create or replace function bitrix_sync.acknowledge_dead_letter(p_id bigint, p_operator text, p_reason text)
returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_dl bitrix_sync.technical_dead_letters;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  return query select * from bitrix_sync._resolve_dead_letters(array[v_dl.id], 'acknowledged', p_operator, p_reason, null);
end $$;
comment on function bitrix_sync.acknowledge_dead_letter(bigint, text, text) is
  'Admin (§9): an open technical dead letter was looked at and nothing is sent again. Writes resolved_at, resolved_by, resolution = acknowledged and the reason; the entry leaves status_dead_letters and the open-DLQ gauge. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved.';

create or replace function bitrix_sync.requeue_dead_letter(p_id bigint, p_operator text, p_reason text)
returns table (
  dead_letter_id bigint, source text, operation text, resolution text, requeued_to text,
  resolved_at timestamptz, resolved_by text
)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_dl bitrix_sync.technical_dead_letters;
  v_refusal jsonb;
  v_target text;
begin
  perform bitrix_sync._check_admin_audit(p_reason, p_operator);
  v_dl := bitrix_sync._open_dead_letter(p_id);
  -- Lock what the new attempt starts from, so the checks below hold until commit.
  if v_dl.workflow_id is not null then
    perform 1 from bitrix_sync.workflow_instances w where w.id = v_dl.workflow_id for update;
  elsif v_dl.source = 'crm_command' then
    perform 1 from bitrix_sync.business_alerts a
     where a.id = (select c.alert_id from bitrix_sync.crm_commands c where c.id = v_dl.command_id)
       for update;
  end if;
  v_refusal := bitrix_sync._requeue_refusal(v_dl);
  if v_refusal ->> 'code' = 'BS042' then
    raise exception 'technical dead letter % cannot be requeued: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS042', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  elsif v_refusal is not null then
    raise exception 'technical dead letter % cannot be requeued yet: %', p_id, v_refusal ->> 'message'
      using errcode = 'BS043', hint = replace(v_refusal ->> 'hint', '<id>', p_id::text);
  end if;
  begin
    v_target := bitrix_sync._requeue_target(v_dl);
  exception when unique_violation then
    -- A new intent or workflow of the user arrived between the check and the insert.
    raise exception 'technical dead letter % cannot be requeued: the user has new work under way', p_id
      using errcode = 'BS043', hint = 'Wait until it finishes (bitrix_sync.status_workflows), then look again with list_dead_letters().';
  end;
  return query select * from bitrix_sync._resolve_dead_letters(
    bitrix_sync._covered_dead_letters(v_dl), 'requeued', p_operator, p_reason, v_target);
end $$;
comment on function bitrix_sync.requeue_dead_letter(bigint, text, text) is
  'Admin (§9): starts a new, fenced attempt of what an open technical dead letter gave up on, through the normal state machine (a new intent or inbox row, the failed workflow from its first step, or the alert''s mirror), with a retry horizon counted from now; marks it (and the open entries the same attempt answers) resolved as requeued with operator and reason. BS004 missing operator or reason, BS040 no such entry, BS041 already resolved, BS042 nothing to run again, BS043 something else of the same user or alert is running.';

-- Privileges: sql/privileges.sql (the admin role executes list, acknowledge and requeue; the
-- internal helpers run inside them as their owner and are granted to nobody).
-- <<< sql/dead_letters.sql
-- >>> sql/row_guards.sql (included)
-- Row guards beyond the state edges (§6.3, §5.4, §12.3, §17; issue 10): a row is born in its
-- machine's initial state, and the columns that identify a row or record who did what never change.
-- Triggers, so they hold for every writer: the runtime role (whose grants already leave these
-- columns out, sql/privileges.sql), the admin functions and the schema owner's own accidents.
-- Tests and repairs that must start a row elsewhere turn triggers off explicitly
-- (session_replication_role = replica, superuser only). Re-runnable.

create or replace function bitrix_sync.tg__refuse_insert_state() returns trigger
language plpgsql as $$
-- TG_ARGV[0]: the initial state in words. The trigger's WHEN clause decides; this only reports.
begin
  raise exception 'a new row of %.% must start %', tg_table_schema, tg_table_name, tg_argv[0]
    using errcode = 'BS030',
          hint = 'Create rows through their bitrix_sync function; they move on only along bitrix_sync.state_edges (docs/state-machines.md).';
end $$;
comment on function bitrix_sync.tg__refuse_insert_state() is
  'BEFORE INSERT guard, fired by its WHEN clause when a row is inserted in a state other than its machine''s initial one (or already leased or finished). SQLSTATE BS030.';

create or replace function bitrix_sync.tg__refuse_immutable_change() returns trigger
language plpgsql as $$
-- TG_ARGV: the columns that never change.
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_changed text;
begin
  select string_agg(c, ', ' order by c) into v_changed
    from unnest(tg_argv) c
   where v_old -> c is distinct from v_new -> c;
  if v_changed is not null then
    raise exception '%.% never changes %', tg_table_schema, tg_table_name, v_changed
      using errcode = 'BS031',
            hint = 'These columns identify the row or record its audit. Open a new row instead: a new mapping (close_mapping, open_mapping), a new rebind request, a new settings version.';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg__refuse_immutable_change() is
  'BEFORE UPDATE guard: refuses a change of any column named in TG_ARGV (identity and audit columns). SQLSTATE BS031.';

create or replace function bitrix_sync.tg_settings_versions__freeze() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  v_old jsonb := to_jsonb(old);
  v_new jsonb := to_jsonb(new);
  v_allowed text[];
  v_changed text;
begin
  -- What each step of the settings machine may write; everything else is history once written.
  v_allowed := case
    when old.status = 'draft' and new.status = 'draft' then array['settings_values', 'note']
    when old.status = 'draft' then array['status', 'settings_values', 'validation_errors', 'validated_at',
                                         'validated_db_user']
    when old.status = 'validated' and new.status = 'active' then array['status', 'activated_by', 'activated_at',
                                                                       'activated_db_user']
    when old.status = 'active' and new.status = 'superseded' then array['status', 'superseded_at']
    -- Any other status change is judged by the guard trigger _100_guard_status.
    else array['status']
  end;
  select string_agg(k, ', ' order by k) into v_changed
    from jsonb_object_keys(v_new) k
   where k <> all (v_allowed) and v_old -> k is distinct from v_new -> k;
  if v_changed is not null then
    raise exception 'settings version % is %: % can no longer change', old.version, old.status, v_changed
      using errcode = 'BS031',
            hint = 'A version''s values and audit are history once it leaves draft. Propose a new version with propose_settings().';
  end if;
  return new;
end $$;
comment on function bitrix_sync.tg_settings_versions__freeze() is
  'BEFORE UPDATE guard on settings_versions: values and note change only while a version is a draft; validation, activation and supersession each write only their own audit columns (the declared actor and the login); created_by, created_db_user, based_on, rollback_of never change. SQLSTATE BS031.';

-- Initial states (the [*] arrows of docs/state-machines.md). WHEN keeps the hot inserts (inbox,
-- commands, queue) free of a PL/pgSQL call.
drop trigger if exists _110_initial_state on han_app.sync_queue;
create trigger _110_initial_state before insert on han_app.sync_queue
  for each row when (new.status <> 'pending' or new.lease_token is not null or new.completed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('pending, without a lease');
comment on trigger _110_initial_state on han_app.sync_queue is 'Intents are recorded pending (§6.1).';

drop trigger if exists _110_initial_state on bitrix_sync.workflow_instances;
create trigger _110_initial_state before insert on bitrix_sync.workflow_instances
  for each row when (new.state <> 'created' or new.lease_token is not null or new.finished_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('created, without a lease');
comment on trigger _110_initial_state on bitrix_sync.workflow_instances is 'Workflows start created (§7.1).';

drop trigger if exists _110_initial_state on bitrix_sync.crm_commands;
create trigger _110_initial_state before insert on bitrix_sync.crm_commands
  for each row when (new.status <> 'pending' or new.lease_token is not null or new.sent_at is not null
                     or new.completed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('pending, never sent, without a lease');
comment on trigger _110_initial_state on bitrix_sync.crm_commands is 'Commands are issued pending (§7.2).';

drop trigger if exists _110_initial_state on bitrix_sync.webhook_inbox;
create trigger _110_initial_state before insert on bitrix_sync.webhook_inbox
  for each row when (new.status <> 'received' or new.lease_token is not null or new.coalesced_into is not null
                     or new.processed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('received, without a lease');
comment on trigger _110_initial_state on bitrix_sync.webhook_inbox is 'Webhooks are recorded received (§7.3).';

drop trigger if exists _110_initial_state on bitrix_sync.entity_external_mapping;
create trigger _110_initial_state before insert on bitrix_sync.entity_external_mapping
  for each row when (new.status <> 'active')
  execute function bitrix_sync.tg__refuse_insert_state('active');
comment on trigger _110_initial_state on bitrix_sync.entity_external_mapping is 'A link is opened active; it is closed or broken only by close_mapping (§6.3).';

drop trigger if exists _110_initial_state on bitrix_sync.rebind_requests;
create trigger _110_initial_state before insert on bitrix_sync.rebind_requests
  for each row when (new.status <> 'requested' or new.completed_at is not null or new.failure_code is not null)
  execute function bitrix_sync.tg__refuse_insert_state('requested');
comment on trigger _110_initial_state on bitrix_sync.rebind_requests is 'Rebind requests start requested (§5.4).';

drop trigger if exists _110_initial_state on bitrix_sync.business_alerts;
create trigger _110_initial_state before insert on bitrix_sync.business_alerts
  for each row when (new.status <> 'open' or new.crm_sync_status <> 'pending' or new.closed_at is not null)
  execute function bitrix_sync.tg__refuse_insert_state('open, with its CRM mirror pending');
comment on trigger _110_initial_state on bitrix_sync.business_alerts is 'Alerts open, and are mirrored into the CRM afterwards (§11).';

drop trigger if exists _110_initial_state on bitrix_sync.settings_versions;
create trigger _110_initial_state before insert on bitrix_sync.settings_versions
  for each row when (new.status <> 'draft' or new.validation_errors is not null or new.validated_at is not null
                     or new.activated_by is not null or new.activated_at is not null or new.superseded_at is not null
                     or new.validated_db_user is not null or new.activated_db_user is not null)
  execute function bitrix_sync.tg__refuse_insert_state('draft, neither validated nor activated');
comment on trigger _110_initial_state on bitrix_sync.settings_versions is 'A settings version starts as a draft and is validated before it can be activated (§12.3).';

-- Identity and audit columns.
drop trigger if exists _120_immutable on bitrix_sync.entity_external_mapping;
create trigger _120_immutable before update on bitrix_sync.entity_external_mapping
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'id', 'entity_type', 'entity_id', 'external_system', 'external_entity_type', 'external_id', 'opened_at', 'created_at');
comment on trigger _120_immutable on bitrix_sync.entity_external_mapping is
  'A link never changes its user or Contact: a new mapping is opened instead (§4).';

drop trigger if exists _120_immutable on bitrix_sync.rebind_requests;
create trigger _120_immutable before update on bitrix_sync.rebind_requests
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'id', 'user_id', 'previous_contact_id', 'target_contact_id', 'reason', 'operator_id', 'workflow_id', 'requested_at',
    'requested_db_user');
comment on trigger _120_immutable on bitrix_sync.rebind_requests is
  'The request, its reason, its operator and the login that asked are audit (§5.4): only its progress changes.';

drop trigger if exists _120_immutable on bitrix_sync.settings_versions;
create trigger _120_immutable before update on bitrix_sync.settings_versions
  for each row execute function bitrix_sync.tg_settings_versions__freeze();
comment on trigger _120_immutable on bitrix_sync.settings_versions is
  'Values and audit are history once a version leaves draft (§12.3).';

drop trigger if exists _120_immutable on bitrix_sync.cutover;
create trigger _120_immutable before update on bitrix_sync.cutover
  for each row execute function bitrix_sync.tg__refuse_immutable_change(
    'singleton', 'cutover_watermark', 'cancelled_count', 'performed_by', 'performed_at', 'performed_db_user');
comment on trigger _120_immutable on bitrix_sync.cutover is
  'The cutover happens once (§17): moving the watermark would silently stop or replay App intake.';

drop trigger if exists _200_forbid_delete on bitrix_sync.cutover;
create trigger _200_forbid_delete before delete on bitrix_sync.cutover
  for each row execute function bitrix_sync.tg__forbid_delete();
comment on trigger _200_forbid_delete on bitrix_sync.cutover is 'The cutover record is kept: deleting it would close the processing gate.';
-- <<< sql/row_guards.sql
-- >>> sql/privileges.sql (included)
-- The privilege catalogue (§13, DESIGN.md "Roles"; issue 10): for every schema, table, view,
-- sequence and function of the project, what each of the three roles may do, written out, "nothing"
-- included. sql/grants.sql revokes everything and grants exactly this list; docs/security.md is
-- rendered from it; test/integration/privileges.test.ts checks that the database's ACLs equal it and
-- that no object of bitrix_sync (or the project's objects of han_app) lacks a decision.
--
-- Adding a function, table, view or sequence: add one row here (runtime, admin, app; '{}' is an
-- explicit "nothing") and include sql/privileges.sql and sql/grants.sql in the migration.
--
-- A privilege is written as GRANT takes it: 'SELECT', 'EXECUTE', 'USAGE', or with columns,
-- 'UPDATE (status, locked_by)'. Objects are schema-qualified; a function by its signature as
-- regprocedure prints it (types, no parameter names).
--
-- Who is who: bitrix_sync_user runs the service (the functions it calls and their internal
-- helpers; it writes its tables only in the columns those functions write, so an insert can never
-- name a state and identity or audit columns are out of reach; sql/row_guards.sql holds the same
-- rules for every writer). bitrix_sync_admin is an operator with psql: the audited admin functions
-- (security definer, so no table rights), the status views and the settings it changes.
-- han_app_user is the App: its identity and profile tables; sync_queue rows appear through the
-- security definer trigger.

create or replace view bitrix_sync.role_privileges as
with decisions (object_type, object_name, runtime, admin, app, note) as (values
  -- schemas
  ('schema', 'bitrix_sync', array['USAGE'], array['USAGE'], array[]::text[], 'The project''s schema; the App has no business in it.'),
  ('schema', 'han_app', array['USAGE'], array[]::text[], array['USAGE'], 'The App''s schema; the admin reaches the queue only through status_queue.'),

  -- App tables (§13: the runtime reads the columns it needs and writes only the CRM-master fields)
  ('table', 'han_app.user_identity', array['SELECT (id, phone_number, record_status, created_at, updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'Identity is App-master; the runtime reads it at send time.'),
  ('table', 'han_app.client_profile',
   array['SELECT (id, user_id, full_name, citizenship, email, record_status, source_updated_at, created_at, updated_at)',
         'UPDATE (full_name, citizenship, email, source_updated_at)'], array[]::text[],
   array['SELECT', 'INSERT', 'UPDATE'], 'The runtime writes only the CRM-master fields (§3.1), through apply_crm_master_fields.'),
  ('table', 'han_app.sync_queue',
   array['SELECT', 'UPDATE (status, locked_by, locked_until, lease_token, attempt_count, next_attempt_at, last_error_code, last_error_at, completed_at, cancel_reason, updated_at)'],
   array[]::text[], array['SELECT'],
   'Intents appear through the fold of the App''s journal (fold_intent_journal, security definer); the runtime moves them through the lease functions and never inserts one.'),
  ('table', 'han_app.sync_queue_journal', array['SELECT'], array[]::text[], array['SELECT'],
   'The trigger (security definer) appends and fold_intent_journal (security definer) takes; the runtime and the App may look, neither writes.'),
  ('function', 'han_app.enqueue_contact_sync()', array[]::text[], array[]::text[], array[]::text[],
   'Trigger function (security definer): fires for the App''s writes; nobody calls it.'),

  -- bitrix_sync tables the runtime writes through its functions: only the columns they write
  ('table', 'bitrix_sync.business_alerts',
   array['SELECT',
         'INSERT (alert_type, severity, fingerprint, user_id, current_contact_id, selected_contact_id, candidate_contact_ids, details, previous_alert_id, correlation_id)',
         'UPDATE (occurrence_count, last_occurred_at, current_contact_id, selected_contact_id, candidate_contact_ids, details, correlation_id, crm_sync_status, item_id, stage_id, status, closed_at)'],
   array[]::text[], array[]::text[], 'Alerts are raised open and finished by the runtime; the admin sees them through status_alerts.'),
  ('sequence', 'bitrix_sync.business_alert_number_seq', array['USAGE'], array[]::text[], array[]::text[],
   'The default of business_alerts.alert_number, evaluated as the inserting role.'),
  ('table', 'bitrix_sync.contact_snapshots',
   array['SELECT',
         'INSERT (contact_id, user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)',
         'UPDATE (user_id, name_hash, email_hash, phone_hash, citizenship_enum_id, citizenship_dictionary_loaded_at, registered, crm_created_at, crm_updated_at, last_applied_source, last_applied_at, last_webhook_received_at, stale, stale_reason)'],
   array[]::text[], array[]::text[], 'Hashes of what the runtime last wrote into or read from each Contact.'),
  ('table', 'bitrix_sync.crm_commands',
   array['SELECT',
         'INSERT (workflow_id, alert_id, command_type, params, revision, correlation_id, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, next_attempt_at, sent_at, batch_id, attempt_count, first_sent_at, deadline_at, response, completed_at, last_error_code, last_http_status, last_bitrix_error, limit_hits)'],
   array[]::text[], array[]::text[], 'Issued pending (no status column to insert); what a command asks for never changes after issue.'),
  ('table', 'bitrix_sync.entity_external_mapping',
   array['SELECT', 'INSERT (entity_id, external_id, workflow_id)',
         'UPDATE (status, closed_at, close_reason, workflow_id, held_at, held_crm_updated_at, hold_released_at, hold_released_by)'],
   array[]::text[], array[]::text[], 'Opened active and closed by the runtime''s mapping functions, which also hold and release a link made by phone alone; the user and the Contact of a link never change.'),
  ('table', 'bitrix_sync.reconciliation_cursors',
   array['SELECT', 'INSERT (job_type)',
         'UPDATE (watermark, overlap, last_run_started_at, last_success_at, last_run_status, last_error_code, last_scanned, last_updated, last_recovered, recovered_baseline, lease_token)'],
   array[]::text[], array[]::text[], 'The reconciliation runs'' cursors and leases.'),
  ('table', 'bitrix_sync.technical_dead_letters',
   array['INSERT (source, source_id, workflow_id, command_id, operation, error_code, http_status, bitrix_error, attempt_count, first_attempt_at, deadline_at, correlation_id)'],
   array[]::text[], array[]::text[], 'The runtime only adds dead letters (never resolves them); everyone reads them through status_dead_letters.'),
  ('table', 'bitrix_sync.webhook_inbox',
   array['SELECT', 'INSERT (receiver, entity_type_id, entity_id, source_ip, trace_context)',
         'UPDATE (status, lease_token, locked_by, locked_until, attempt_count, status_at, coalesced_into, outcome, processed_at, last_error_code, next_attempt_at)'],
   array[]::text[], array[]::text[], 'Recorded received by accept_webhooks; what arrived never changes.'),
  ('table', 'bitrix_sync.workflow_instances',
   array['SELECT', 'INSERT (workflow_type, intent_type, user_id, source_task_id, content_hash, trace_context)',
         'UPDATE (state, revision, intent_type, source_task_id, content_hash, next_attempt_at, lease_token, locked_by, locked_until, attempt_count, current_step, step_data, contact_id, outcome, last_error_code, processed_revision, finished_at, deadline_at, held_intent_type, held_source_task_id, held_content_hash, held_at, trace_context)'],
   array[]::text[], array[]::text[], 'Started created; a workflow''s type, user and correlation never change. An App intent arriving during a rebind is held on the rebind''s row (start_or_join_workflow).'),

  -- the limiter's ephemeral state: rows are counters and slots, not history
  ('table', 'bitrix_sync.crm_inflight_slots', array['SELECT', 'INSERT', 'DELETE'], array[]::text[], array[]::text[],
   'In-flight slots; the admin reads them through crm_limiter_state().'),
  ('table', 'bitrix_sync.crm_method_blocks', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Per-method operating-time blocks.'),
  ('table', 'bitrix_sync.crm_rate_buckets', array['SELECT', 'INSERT', 'UPDATE'], array[]::text[], array[]::text[],
   'Token buckets.'),

  -- metrics (sql/metrics.sql): written by security definer triggers, read by metrics_snapshot()
  ('table', 'bitrix_sync.metric_event_totals', array[]::text[], array[]::text[], array[]::text[],
   'Counter totals; only metrics_snapshot() (security definer) folds into and reads them.'),
  ('table', 'bitrix_sync.metric_events', array[]::text[], array[]::text[], array[]::text[],
   'Counted events; appended by the security definer _900 triggers whoever makes the change.'),

  -- read-only for the runtime: audit and configuration are the admin's, through its functions
  ('table', 'bitrix_sync.cutover', array['SELECT'], array['SELECT'], array[]::text[],
   'Written once by perform_cutover() (admin); the runtime only reads the watermark.'),
  ('table', 'bitrix_sync.rebind_requests', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by request_bitrix_contact_rebind() (admin) and the security definer functions of the rebind workflow; reason and operator are audit.'),
  ('table', 'bitrix_sync.settings', array['SELECT'], array['SELECT'], array[]::text[],
   'The catalogue of keys and bounds; changed by migrations only.'),
  ('table', 'bitrix_sync.admin_actions', array[]::text[],
   array['SELECT (id, action, workflow_id, rebind_request_id, dead_letter_id, decision, reason, operator_id, db_user, performed_at)'], array[]::text[],
   'Audit of the admin functions (security definer) that write it; the Contact a decision named stays out of the admin''s reading.'),
  ('table', 'bitrix_sync.settings_versions', array['SELECT'], array['SELECT'], array[]::text[],
   'Written by the admin''s settings functions only.'),

  -- identity sequences: inserting into an identity column needs no right on its sequence
  ('sequence', 'bitrix_sync.admin_actions_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of admin_actions.'),
  ('sequence', 'bitrix_sync.business_alerts_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of business_alerts.'),
  ('sequence', 'bitrix_sync.crm_commands_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of crm_commands.'),
  ('sequence', 'bitrix_sync.settings_versions_version_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of settings_versions.'),
  ('sequence', 'bitrix_sync.technical_dead_letters_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of technical_dead_letters.'),
  ('sequence', 'bitrix_sync.webhook_inbox_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of webhook_inbox.'),

  -- views
  ('view', 'bitrix_sync.parked_workflows', array[]::text[], array['SELECT'], array[]::text[],
   'Workflows waiting for a person, with their reason and the decisions that apply (docs/admin.md).'),
  ('view', 'bitrix_sync.rebind_request_status', array[]::text[], array['SELECT'], array[]::text[],
   'Rebind requests as an admin follows them (docs/admin.md).'),
  ('view', 'bitrix_sync.role_privileges', array[]::text[], array['SELECT'], array[]::text[], 'This catalogue.'),
  ('view', 'bitrix_sync.role_privilege_drift', array[]::text[], array['SELECT'], array[]::text[],
   'Where the database''s ACLs differ from this catalogue (empty when they agree).'),
  ('view', 'bitrix_sync.state_edges', array['SELECT'], array['SELECT'], array[]::text[],
   'Read by fire_workflow_event and by the guard triggers, which run as the writing role.'),
  ('view', 'bitrix_sync.status_alerts', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): counts and ages only.'),
  ('view', 'bitrix_sync.status_alert_mirror', array['SELECT'], array['SELECT'], array[]::text[],
   'Status (§14): alerts whose smart-process item is behind (pending, failed); read by /metrics.'),
  ('view', 'bitrix_sync.status_commands', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_dead_letters', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_queue', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_webhooks', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_workflows', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14).'),
  ('view', 'bitrix_sync.status_held_links', array['SELECT'], array['SELECT'], array[]::text[], 'Status (§14): links whose CRM-master fields are held back; counts only.'),
  ('view', 'bitrix_sync.held_phone_links', array[]::text[], array['SELECT'], array[]::text[],
   'Held links made by phone alone, as an admin confirms them (docs/admin.md); no user or Contact IDs.'),

  -- admin functions (security definer): cutover, settings, rebind, re-recording a lost webhook
  ('function', 'bitrix_sync.accept_webhook(text,integer,text,inet)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Re-records one robot call by hand (the robot does not retry).'),
  ('function', 'bitrix_sync.activate_settings_version(integer,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.perform_cutover(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The one-time cutover (§17); it also opens the processing gate.'),
  ('function', 'bitrix_sync.propose_settings(jsonb,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.request_bitrix_contact_rebind(uuid,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind (§5.4).'),
  ('function', 'bitrix_sync.cancel_rebind_request(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Rebind: cancel an open request (docs/admin.md).'),
  ('function', 'bitrix_sync.confirm_phone_link(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Held phone links: release a hold and queue the read that applies the fields, audited (docs/admin.md).'),
  ('function', 'bitrix_sync.resume_parked_workflow(uuid,text,text,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: resume with a decision.'),
  ('function', 'bitrix_sync.cancel_parked_workflow(uuid,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Parked workflows: cancel with a reason.'),
  ('function', 'bitrix_sync._parked_decisions(text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The decisions a parked reason admits; called by the parked_workflows view with the reader''s rights.'),
  ('function', 'bitrix_sync.rollback_settings(integer,text,text)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.validate_settings_version(integer)', array[]::text[], array['EXECUTE'], array[]::text[], 'Settings (§12.3).'),
  ('function', 'bitrix_sync.list_dead_letters(boolean,integer)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: what is open, and what a requeue would do (docs/admin.md).'),
  ('function', 'bitrix_sync.acknowledge_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: resolved without a new attempt, audited.'),
  ('function', 'bitrix_sync.requeue_dead_letter(bigint,text,text)', array[]::text[], array['EXECUTE'], array[]::text[],
   'Dead letters: a new attempt through the normal state machine, audited.'),
  ('function', 'bitrix_sync.retention_preview()', array[]::text[], array['EXECUTE'], array[]::text[],
   'Retention: what the next run would delete (reads the history: by hand only).'),
  ('function', 'bitrix_sync.delete_retention_batch(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Retention: one batch of finished rows (security definer: nobody holds DELETE on those tables); the hourly task, or an admin now.'),

  -- read functions both roles use
  ('function', 'bitrix_sync._active_setting(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'Read by SQL rules, column defaults (the retry deadline) and status_alerts, as the calling role.'),
  ('function', 'bitrix_sync.active_settings()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The active settings with defaults.'),
  ('function', 'bitrix_sync.crm_limiter_state(text)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Limiter state for status (§14).'),
  ('function', 'bitrix_sync.cutover_performed()', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'The processing gate, for readiness and the pump.'),

  ('function', 'bitrix_sync.metrics_snapshot(text,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[],
   'GET /metrics (security definer): counts, ages and counters with low-cardinality labels; the admin may run it in psql.'),

  -- runtime functions: the receivers
  ('function', 'bitrix_sync.accept_webhooks(text[],integer[],text[],inet[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'The receivers'' one statement (and the readiness probe of that path).'),
  ('function', 'bitrix_sync.alert_config_problem()', array['EXECUTE'], array[]::text[], array[]::text[], 'Readiness: alert_config_invalid.'),
  ('function', 'bitrix_sync.alert_entity_type_id()', array['EXECUTE'], array[]::text[], array[]::text[], 'The alert receiver''s entity type.'),
  -- runtime functions: intake and workflows
  ('function', 'bitrix_sync.cancel_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_sync_tasks(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function (gated by the cutover).'),
  ('function', 'bitrix_sync.fold_intent_journal(integer,boolean)', array['EXECUTE'], array['EXECUTE'], array[]::text[], 'Called first by claim_sync_tasks and perform_cutover; an admin may fold to see recorded intents in the queue now.'),
  ('function', 'bitrix_sync.watch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop takes the intake watch before it sleeps (the App''s intents then NOTIFY).'),
  ('function', 'bitrix_sync.unwatch_intake()', array['EXECUTE'], array[]::text[], array[]::text[], 'The sync loop releases the intake watch when it wakes.'),
  ('function', 'bitrix_sync.complete_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.dead_letter_sync_task(uuid,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.extend_sync_task_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.release_sync_task(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.retry_sync_task(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Queue lease function.'),
  ('function', 'bitrix_sync.claim_workflows(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (gated by the cutover).'),
  ('function', 'bitrix_sync.extend_workflow_lease(uuid,uuid,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.fire_workflow_event(uuid,uuid,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.save_workflow_step(uuid,uuid,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.step_context(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function (the start of a step).'),
  ('function', 'bitrix_sync.schedule_workflow_retry(uuid,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Workflow function.'),
  ('function', 'bitrix_sync.start_or_join_workflow(uuid,text,uuid,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake.'),
  ('function', 'bitrix_sync.take_sync_tasks(uuid[],uuid[],uuid[],text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Intake of a claimed batch in one call.'),
  -- runtime functions: commands and the pump
  ('function', 'bitrix_sync.begin_command_reconcile(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.claim_commands(text,integer,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_command(bigint,uuid,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.complete_commands(bigint[],uuid[],jsonb[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump settles a batch with it).'),
  ('function', 'bitrix_sync.bring_forward_commands(text[],integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function (the pump after a portal-wide failure).'),
  ('function', 'bitrix_sync.dead_letter_command(bigint,uuid,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_alert_command(bigint,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.issue_command(uuid,uuid,text,jsonb,text,text,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.mark_command_uncertain(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.reject_command(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.release_command(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.resolve_command_reconcile(bigint,uuid,text,jsonb,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.retry_command(bigint,uuid,text,interval,boolean,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  ('function', 'bitrix_sync.send_commands(bigint[],uuid[],uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Command function.'),
  -- runtime functions: the limiter
  ('function', 'bitrix_sync.acquire_crm_request(text,text,double precision,integer,integer,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.blocked_crm_methods(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_operating(text,text[],double precision[],timestamp with time zone[])', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_method_blocked(text,text,timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_rate_limited(text,double precision,double precision,integer,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.note_crm_answered(text,double precision,double precision)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  ('function', 'bitrix_sync.release_crm_request(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Limiter.'),
  -- runtime functions: inbox processing, mapping, snapshots, alerts, rebind workflow, reconciliation
  ('function', 'bitrix_sync.claim_webhooks(text,integer,interval,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox (gated by the cutover).'),
  ('function', 'bitrix_sync.complete_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.dead_letter_webhook(bigint,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.retry_webhook(bigint,uuid,text,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Inbox.'),
  ('function', 'bitrix_sync.active_mapping_for_contact(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.active_mapping_for_user(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.recover_alert_command(bigint,interval)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Alert mirroring: an unanswered alert command moves on (sql/alert_mirror.sql).'),
  ('function', 'bitrix_sync.alerts_to_look_up(integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: items to look up.'),
  ('function', 'bitrix_sync.issue_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup of an item.'),
  ('function', 'bitrix_sync.resolve_alert_lookup(bigint,jsonb)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: the lookup''s outcome.'),
  ('function', 'bitrix_sync.fail_alert_lookup(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alert mirroring: a lookup that failed for good.'),
  ('function', 'bitrix_sync.close_mapping(uuid,text,uuid,boolean)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.open_mapping(uuid,text,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Mapping.'),
  ('function', 'bitrix_sync.apply_crm_master_fields(uuid,text,text,text,text,text,text,text,timestamp with time zone,boolean,timestamp with time zone,timestamp with time zone,text,timestamp with time zone)',
   array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots and the CRM-master profile write.'),
  ('function', 'bitrix_sync.mark_contact_snapshot_stale(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_created(text,uuid,text,text,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.record_contact_phone(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Snapshots.'),
  ('function', 'bitrix_sync.finish_business_alert(bigint,text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirror_failed(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.mark_alert_mirrored(bigint)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.raise_business_alert(text,text,text,uuid,text,text,jsonb,jsonb,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.record_alert_item(bigint,bigint,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Alerts.'),
  ('function', 'bitrix_sync.complete_rebind(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync._close_rebind_request(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Security definer, called by the trigger that closes the request of a finished contact.rebind workflow (the runtime''s transitions fire it).'),
  ('function', 'bitrix_sync.start_rebind_request(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Rebind workflow (security definer, fenced by the workflow lease).'),
  ('function', 'bitrix_sync.claim_reconciliation_cursor(text,interval,boolean,interval)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation (gated by the cutover).'),
  ('function', 'bitrix_sync.fail_reconciliation_run(text,uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.finish_reconciliation_run(text,uuid,integer,integer,integer)', array['EXECUTE'], array[]::text[], array[]::text[], 'Reconciliation.'),
  ('function', 'bitrix_sync.hold_phone_link(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: the hold of a link made by phone alone (mapping.hold_after_phone_link).'),
  ('function', 'bitrix_sync.keep_phone_link_hold(uuid,text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a link found through the user id an earlier, still held link of the pair wrote keeps the hold.'),
  ('function', 'bitrix_sync.held_link_read(uuid,timestamp with time zone,boolean)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Mapping: a read of a held link''s Contact (final read, webhook, reconciliation) records, keeps or releases the hold.'),
  ('function', 'bitrix_sync.rekey_contact_phones(text[],text[],text[])', array['EXECUTE'], array[]::text[], array[]::text[],
   'The hourly rekey_hashes task: legacy phone hashes of snapshots rewritten under the hash key.'),

  -- internal helpers the runtime's (security invoker) functions call: a nested call is checked
  -- against the calling role too
  ('function', 'bitrix_sync._check_bitrix_error(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._check_code(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: refuses raw text as an error code.'),
  ('function', 'bitrix_sync._check_limiter_name(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the limiter.'),
  ('function', 'bitrix_sync._command_first_attempt(bitrix_sync.crm_commands)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_command_row(bitrix_sync.crm_commands,text,integer,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._dead_letter_sync_task_row(han_app.sync_queue,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the queue functions.'),
  ('function', 'bitrix_sync._dead_letter_webhook_row(bitrix_sync.webhook_inbox,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the inbox functions.'),
  ('function', 'bitrix_sync._held_workflow(uuid,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the workflow functions.'),
  ('function', 'bitrix_sync._is_write_command(text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of claim_commands.'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue, start_or_join, accept_webhooks).'),
  ('function', 'bitrix_sync._trace_context(text)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper: a W3C traceparent or null (issue_command, start_or_join_workflow, accept_webhooks).'),
  ('function', 'bitrix_sync._refuse_stale(text,text)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper: the BS001 refusal.'),
  ('function', 'bitrix_sync._retry_deadline(timestamp with time zone)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper and the default of deadline_at, evaluated as the inserting role.'),
  ('function', 'bitrix_sync._wake_workflow(uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command functions.'),
  ('function', 'bitrix_sync._workflow_holder(bigint,uuid)', array['EXECUTE'], array[]::text[], array[]::text[], 'Internal helper of the command reconcile functions.'),
  ('function', 'bitrix_sync._workflow_first_attempt(bitrix_sync.workflow_instances)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of schedule_workflow_retry: the horizon counts from a requeue.'),
  ('function', 'bitrix_sync._alert_add_unsafe(bigint)', array['EXECUTE'], array[]::text[], array[]::text[],
   'Internal helper of the alert mirror (runAlertSync asks it before an add).'),

  -- nobody: internals of security definer functions, trigger functions (a trigger fires without
  -- EXECUTE), and record_webhook (one NOTIFY per row; kept for sources with stable event IDs)
  ('function', 'bitrix_sync._abandon_workflow_commands(uuid,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync.clear_unkeyed_hashes()', array[]::text[], array[]::text[], array[]::text[],
   'Run by migration 000029 as the owner: unkeyed hashes cleared where the next read recomputes them.'),
  ('function', 'bitrix_sync._check_admin_audit(text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._open_dead_letter(bigint)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_refusal(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._requeue_target(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._covered_dead_letters(bitrix_sync.technical_dead_letters)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of requeue_dead_letter.'),
  ('function', 'bitrix_sync._resolve_dead_letters(bigint[],text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the dead-letter functions.'),
  ('function', 'bitrix_sync._retention_cutoff(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the retention functions.'),
  ('function', 'bitrix_sync._record_admin_action(text,uuid,uuid,text,text,text,text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the admin functions.'),
  ('function', 'bitrix_sync._rebind_crm_outcome(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of _close_rebind_request and cancel_rebind_request.'),
  ('function', 'bitrix_sync.tg_workflow_instances__close_rebind_request()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__start_held_intent()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync._normalise_settings(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync._rebind_request_of(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the rebind workflow functions.'),
  ('function', 'bitrix_sync._resolve_conflict_alerts(uuid)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of complete_rebind.'),
  ('function', 'bitrix_sync._settings_errors(jsonb)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the settings functions.'),
  ('function', 'bitrix_sync.record_webhook(text,integer,text,inet,text,timestamp with time zone)', array[]::text[], array[]::text[], array[]::text[],
   'Not used by the service: the receivers call accept_webhooks.'),
  ('function', 'bitrix_sync.tg__forbid_delete()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__guard_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_workflow_instances__guard_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_immutable_change()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__refuse_insert_state()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg__set_updated_at()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.'),
  ('function', 'bitrix_sync.tg_crm_commands__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_technical_dead_letters__count()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_webhook_inbox__count_coalesced()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_workflow_instances__count_transition()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function (metrics).'),
  ('function', 'bitrix_sync.tg_settings_versions__freeze()', array[]::text[], array[]::text[], array[]::text[], 'Trigger function.')
)
select d.object_type, d.object_name, r.role, r.privileges, d.note
  from decisions d
  cross join lateral (values ('bitrix_sync_user', d.runtime), ('bitrix_sync_admin', d.admin), ('han_app_user', d.app))
    as r(role, privileges);
comment on view bitrix_sync.role_privileges is
  'The privilege catalogue (§13): one row per object and role with the privileges GRANT gives (empty array: explicitly nothing) and why. sql/grants.sql applies exactly this; docs/security.md is rendered from it.';

-- What the database actually grants, in the catalogue's terms, and where the two differ. The
-- project's objects are all of schema bitrix_sync and the objects of han_app the catalogue names
-- (in production han_app holds the App's other tables, which are none of this project's business).
--
-- Beyond the three roles' ACLs it reports what would give someone the project's rights without a
-- grant of this catalogue:
--   * a privilege on a project object held by any other role (the objects' owner aside; the App's
--     schema and its identity and profile tables are the App's to share);
--   * role memberships. The catalogue's rule: each project role may be held by roles outside the
--     project (a login, or a group of logins), each of which holds no other project role, directly
--     or through groups, and none WITH ADMIN OPTION (it could hand the role on); a project role is a
--     member of no role at all (it would gain that role's rights, and a project role inside another
--     one merges the two). The owner of schema bitrix_sync (the migration role, which creates the
--     roles and may administer them) is exempt.
create or replace view bitrix_sync.role_privilege_drift as
with recursive objects as (
  select 'schema'::text as object_type, n.nspname::text as object_name, n.nspowner as owner, n.nspacl as acl,
         null::oid as relid, 'n'::"char" as acl_kind
    from pg_namespace n where n.nspname in ('bitrix_sync', 'han_app')
  union all
  select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'view' else 'table' end,
         format('%I.%I', n.nspname, c.relname), c.relowner, c.relacl, c.oid,
         case c.relkind when 'S' then 's'::"char" else 'r'::"char" end
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('bitrix_sync', 'han_app') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
  union all
  select 'function', p.oid::regprocedure::text, p.proowner, p.proacl, null, 'f'::"char"
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('bitrix_sync', 'han_app')
     and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
), catalogue as (
  select rp.object_type, rp.object_name, rp.role, rp.privileges from bitrix_sync.role_privileges rp
), project_objects as (
  select o.* from objects o
   where o.object_name = 'bitrix_sync' or o.object_name like 'bitrix\_sync.%'
      or exists (select 1 from catalogue c where c.object_type = o.object_type and c.object_name = o.object_name)
), roles (role) as (
  values ('bitrix_sync_user'), ('bitrix_sync_admin'), ('han_app_user')
), actual as (
  -- object-wide privileges ...
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC') as role, a.privilege_type as privilege,
         null::text as column_name
    from project_objects o
    cross join lateral aclexplode(coalesce(o.acl, acldefault(o.acl_kind, o.owner))) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
      or (a.grantee <> o.owner and o.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
  union all
  -- ... and column privileges
  select o.object_type, o.object_name, coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname::text
    from project_objects o
    join pg_attribute att on att.attrelid = o.relid and att.attnum > 0 and not att.attisdropped and att.attacl is not null
    cross join lateral aclexplode(att.attacl) a
    left join pg_roles r on r.oid = a.grantee
   where a.grantee = 0 or r.rolname in (select role from roles)
      or (a.grantee <> o.owner and o.object_name not in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
), project_role_oids as (
  select r.oid, r.rolname::text as rolname from pg_roles r where r.rolname in (select role from roles)
), schema_owner as (
  select n.nspowner as oid from pg_namespace n where n.nspname = 'bitrix_sync'
), held (holder, project_role) as (
  -- Who holds each project role, directly or through groups.
  select m.member, m.roleid from pg_auth_members m where m.roleid in (select oid from project_role_oids)
  union
  select m.member, h.project_role from held h join pg_auth_members m on m.roleid = h.holder
), membership_drift as (
  -- A project role that is a member of any role, and a project role held WITH ADMIN OPTION.
  select g.rolname::text as granted, mr.rolname::text as member,
         case when m.admin_option then 'MEMBER WITH ADMIN OPTION' else 'MEMBER' end as privilege,
         'extra_membership'::text as problem
    from pg_auth_members m
    join pg_roles g on g.oid = m.roleid
    join pg_roles mr on mr.oid = m.member
   where m.member not in (select oid from schema_owner)
     and (m.member in (select oid from project_role_oids)
          or (m.admin_option and m.roleid in (select oid from project_role_oids)))
  union all
  -- A role outside the project that holds more than one project role.
  select p.rolname, hr.rolname::text, 'MEMBER', 'conflicting_membership'
    from held h
    join project_role_oids p on p.oid = h.project_role
    join pg_roles hr on hr.oid = h.holder
   where h.holder not in (select oid from project_role_oids)
     and h.holder not in (select oid from schema_owner)
     and (select count(distinct h2.project_role) from held h2 where h2.holder = h.holder) > 1
), expected as (
  select c.object_type, c.object_name, c.role, m[1] as privilege, btrim(col) as column_name
    from catalogue c
    cross join lateral unnest(c.privileges) spec
    cross join lateral regexp_match(spec, '^([A-Z]+)\s*(?:\((.*)\))?$') m
    cross join lateral unnest(coalesce(string_to_array(m[2], ','), array[null]::text[])) col
)
select e.object_type, e.object_name, e.role, e.privilege, e.column_name, 'missing'::text as problem
  from expected e
 where exists (select 1 from project_objects o where o.object_type = e.object_type and o.object_name = e.object_name)
   and not exists (select 1 from actual a where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                            and a.column_name is not distinct from e.column_name)
union all
select a.object_type, a.object_name, a.role, a.privilege, a.column_name, 'extra'
  from actual a
 where not exists (select 1 from expected e where (a.object_type, a.object_name, a.role, a.privilege) = (e.object_type, e.object_name, e.role, e.privilege)
                                              and a.column_name is not distinct from e.column_name)
   -- PUBLIC is checked only on what the project owns (it never grants PUBLIC anything); the App's
   -- identity and profile tables and its schema keep whatever the App gives everyone.
   and not (a.role = 'PUBLIC' and a.object_name in ('han_app', 'han_app.user_identity', 'han_app.client_profile'))
union all
select o.object_type, o.object_name, r.role, null, null, 'undecided'
  from project_objects o cross join roles r
 where not exists (select 1 from catalogue c where (c.object_type, c.object_name, c.role) = (o.object_type, o.object_name, r.role))
union all
select distinct c.object_type, c.object_name, null, null, null, 'unknown_object'
  from catalogue c
 where not exists (select 1 from objects o where o.object_type = c.object_type and o.object_name = c.object_name)
union all
select distinct 'role', d.granted, d.member, d.privilege, null, d.problem
  from membership_drift d;
comment on view bitrix_sync.role_privilege_drift is
  'Differences between the database''s ACLs and bitrix_sync.role_privileges: missing and extra privileges of the three roles and PUBLIC (column privileges by column), extra privileges of any other role on the project''s objects (the owner aside; the App''s schema, identity and profile tables are the App''s), objects of the project without a decision for a role (undecided), catalogue rows naming no object (unknown_object), and role memberships outside the catalogue''s rule (object_type role, object_name the role held, role the member): a project role that is a member of a role or held WITH ADMIN OPTION (extra_membership), a role outside the project holding more than one project role, directly or through groups (conflicting_membership). Empty when they agree.';
-- <<< sql/privileges.sql
-- >>> sql/grants.sql (included)
-- Least privilege (§13, DESIGN.md): everything is revoked, then exactly what the catalogue
-- bitrix_sync.role_privileges (sql/privileges.sql) lists is granted. Re-runnable; include it (after
-- sql/privileges.sql) in every migration that adds or changes an object of the project.
-- graphile-worker's and graphile-migrate's schemas: sql/worker_grants.sql, applied after every
-- migration run so a graphile-worker upgrade never leaves the runtime role without rights.

do $$
declare
  v_problems text;
  v_row record;
  v_kind text;
begin
  -- A catalogue row naming no object, or an object of the project without a decision for a role,
  -- stops the migration: the next step would leave it with no rights (or the wrong ones) silently.
  select string_agg(distinct format('%s %s (%s)', d.object_type, d.object_name, d.problem), '; ')
    into v_problems
    from bitrix_sync.role_privilege_drift d
   where d.problem in ('unknown_object', 'undecided');
  if v_problems is not null then
    raise exception 'the privilege catalogue does not match the schema: %', v_problems
      using errcode = 'BS092',
            hint = 'Add a row per new object to sql/privileges.sql (runtime, admin, app; ''{}'' for nothing) and drop rows of removed objects, then include sql/privileges.sql and sql/grants.sql in the migration.';
  end if;

  revoke all on schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all tables in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all sequences in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  revoke all on all functions in schema bitrix_sync from public, bitrix_sync_user, bitrix_sync_admin, han_app_user;
  -- In han_app only the project's objects, and PUBLIC only on what the project owns: the App's
  -- schema and tables keep whatever the App grants its other roles and everyone.
  for v_row in
    select distinct rp.object_type, rp.object_name from bitrix_sync.role_privileges rp
     where rp.object_name = 'han_app' or rp.object_name like 'han\_app.%'
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('revoke all on %s %s from bitrix_sync_user, bitrix_sync_admin, han_app_user', v_kind, v_row.object_name);
  end loop;
  revoke all on han_app.sync_queue from public;
  revoke all on han_app.sync_queue_journal from public;
  revoke all on function han_app.enqueue_contact_sync() from public;

  for v_row in
    select rp.object_type, rp.object_name, rp.role, spec
      from bitrix_sync.role_privileges rp cross join lateral unnest(rp.privileges) spec
  loop
    v_kind := case v_row.object_type when 'view' then 'table' else v_row.object_type end;
    execute format('grant %s on %s %s to %I', v_row.spec, v_kind, v_row.object_name, v_row.role);
  end loop;
end $$;
-- <<< sql/grants.sql
