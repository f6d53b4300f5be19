-- The convergence audit (§10.2: "decided separately from production metrics of losses and
-- discrepancies"; docs/workflows.md, "Convergence audit"). Webhooks and the incremental
-- reconciliation repair what changes; what a manager does that no robot reports (a Contact deleted,
-- the App's phone removed, the user id cleared, the registration flag unticked) or what a restore
-- from backup leaves behind stays out of step for ever. The audit (tasks/audit_convergence.ts,
-- src/audit/) compares App, snapshot and Contact for a sample of active links, read-only towards
-- both sides, and records what it finds, one row per user and kind.
--
-- Who calls what: the runtime role runs the audit (claim, sample, record, finish: security definer,
-- fenced by the run's lease); the admin role reads the views and calls repair_drift and
-- request_convergence_audit. Errors: BS060, BS061 (docs/errors.md), BS001 for a run whose lease
-- was taken over, BS004 for bad arguments.
--
-- The drift kinds: which part of a run judges each, and the intent that repairs it.

create or replace function bitrix_sync._drift_kind_group(p_kind text) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
  select case
    when p_kind in ('contact_missing', 'phone_missing', 'user_id_wrong', 'registered_wrong', 'crm_master_behind') then 'link'
    when p_kind in ('unmapped_user', 'inactive_user_linked') then 'user'
    when p_kind in ('registered_inactive_user', 'registered_unknown_user') then 'registered'
  end
$$;
comment on function bitrix_sync._drift_kind_group(text) is
  'Internal: which part of an audit run judges a drift kind: link (a link compared with its Contact), user (App users and links, in SQL), registered (the scan of registered Contacts); null for an unknown kind.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._drift_kind_group(text)', array[]::text[], array[]::text[], array[]::text[], 'Internal helper of the audit functions.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;

create or replace function bitrix_sync._drift_repair_intent(p_kinds text[], p_eligible boolean) returns text
language sql immutable set search_path = pg_catalog, pg_temp as $$
  select case
    -- The user is gone or inactive, or their Contact is registered against them: the deactivation
    -- turns the flag off and closes what is still open (§5.3).
    when p_kinds && array['inactive_user_linked', 'registered_inactive_user', 'registered_unknown_user'] then 'contact.deactivate'
    -- The linked Contact is gone: the update's not-found rule breaks the link, keeps the snapshot
    -- and raises contact_not_found for a person (§5.2); for an inactive user, the deactivation's (§5.3).
    when 'contact_missing' = any(p_kinds) then
      case when p_eligible then 'contact.update' else 'contact.deactivate' end
    -- Everything else is put right by map_or_create: it reads the linked Contact, applies its
    -- CRM-master fields, restores an emptied user id and the flag, and writes a missing phone
    -- (or, without a link, searches and links as for a new user, §5.1).
    when cardinality(p_kinds) > 0 then 'contact.map_or_create'
  end
$$;
comment on function bitrix_sync._drift_repair_intent(text[], boolean) is
  'Internal: the intent repair_drift records for a user with these drift kinds (p_eligible: identity and profile active): contact.deactivate, contact.update (a missing Contact of an active user) or contact.map_or_create.';
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('function', 'bitrix_sync._drift_repair_intent(text[],boolean)', array[]::text[], array['EXECUTE'], array[]::text[],
   'The repair of a drift kind; called by the status_drift view with the reader''s rights.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
