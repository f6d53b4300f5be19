-- The privilege decisions (sql/privileges/) on the tables and sequences of audit/; the
-- tables themselves are written by the migrations that create and change them.
insert into bitrix_sync.privilege_decisions (object_type, object_name, runtime, admin, app, note) values
  ('table', 'bitrix_sync.audit_marks', array[]::text[], array[]::text[], array[]::text[],
   'When each link was last compared; written and read by the audit''s functions only.'),
  ('table', 'bitrix_sync.audit_state', array[]::text[], array[]::text[], array[]::text[],
   'The audit''s run and scan cursor; the admin reads it through status_audit.'),
  ('table', 'bitrix_sync.drift_findings', array[]::text[], array[]::text[], array[]::text[],
   'Drift found by the audit; the admin reads it through status_drift and explain_user.'),
  ('table', 'bitrix_sync.drift_repairs', array[]::text[], array['SELECT'], array[]::text[],
   'Audit of repairs (repair_drift, the automatic repair); never deleted.'),
  ('sequence', 'bitrix_sync.drift_findings_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of drift_findings.'),
  ('sequence', 'bitrix_sync.drift_repairs_id_seq', array[]::text[], array[]::text[], array[]::text[], 'Identity of drift_repairs.')
on conflict (object_type, object_name) do update
  set runtime = excluded.runtime, admin = excluded.admin, app = excluded.app, note = excluded.note;
