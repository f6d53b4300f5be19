-- The App's tables' intent triggers (§6.2; the function: sql/intake/app_trigger.sql). The App's
-- owner usually owns han_app.user_identity and client_profile, and the schema owner is not its member
-- (docs/security.md, "The App's tables"): CREATE OR REPLACE TRIGGER needs only the TRIGGER privilege
-- it grants (deploy/postgres/bootstrap.sql), where DROP TRIGGER and COMMENT ON TRIGGER need the
-- table's owner. So the triggers are replaced in place, and commented where the role running this
-- owns the table (a database whose App tables the migrations created; elsewhere the comments of the
-- first install stay).

-- The WHEN clauses keep every write that records nothing out of PL/pgSQL.
create or replace trigger _500_enqueue_contact_sync_insert
  after insert on han_app.user_identity
  for each row
  when (new.record_status = 'active')
  execute function han_app.enqueue_contact_sync();

create or replace trigger _500_enqueue_contact_sync_update
  after update of phone_number, record_status on han_app.user_identity
  for each row
  when (old.phone_number is distinct from new.phone_number or old.record_status is distinct from new.record_status)
  execute function han_app.enqueue_contact_sync('phone');

create or replace trigger _500_enqueue_contact_sync_insert
  after insert on han_app.client_profile
  for each row
  when (new.record_status = 'active')
  execute function han_app.enqueue_contact_sync();

create or replace trigger _500_enqueue_contact_sync_update
  after update of record_status on han_app.client_profile
  for each row
  when (old.record_status is distinct from new.record_status)
  execute function han_app.enqueue_contact_sync();

do $$
begin
  if pg_catalog.pg_has_role((select c.relowner from pg_catalog.pg_class c where c.oid = 'han_app.user_identity'::pg_catalog.regclass), 'USAGE')
     and pg_catalog.pg_has_role((select c.relowner from pg_catalog.pg_class c where c.oid = 'han_app.client_profile'::pg_catalog.regclass), 'USAGE') then
    comment on trigger _500_enqueue_contact_sync_insert on han_app.user_identity is
      'Records contact.map_or_create for an active identity (§6.2).';
    comment on trigger _500_enqueue_contact_sync_update on han_app.user_identity is
      'Records contact.update (phone change of an active identity), contact.deactivate (leaving active) or contact.map_or_create (back to active) (§6.2).';
    comment on trigger _500_enqueue_contact_sync_insert on han_app.client_profile is
      'Records contact.map_or_create for an active profile (§6.2).';
    comment on trigger _500_enqueue_contact_sync_update on han_app.client_profile is
      'Records contact.deactivate / contact.map_or_create when the profile leaves or returns to active (§6.2).';
  end if;
end $$;
