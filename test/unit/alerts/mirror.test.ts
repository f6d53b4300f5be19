// What an alert's smart-process item carries: every key alerts.fields accepts (ALERT_FIELD_NAMES, the
// same list the catalogue's validation holds) is filled by the mirror, and the lookup of an
// unanswered add prefers the alert number, then the fingerprint, then the title.
import test from "ava";
import { alertItemFields, alertTitle } from "../../../src/alerts/mirror.js";
import { lookupMatch } from "../../../src/alerts/recover.js";
import { ALERT_FIELD_NAMES } from "../../../src/settings-schema.js";
import { DEFAULT_ALERT_SETTINGS } from "../../../tools/emulator/store.js";
import { testSettings } from "../../helpers/settings.js";

const row = {
  id: "7",
  alert_number: "42",
  alert_type: "duplicate_contacts",
  severity: "low",
  fingerprint: "f".repeat(64),
  user_id: "00000000-0000-4000-8000-000000000001",
  current_contact_id: "11",
  selected_contact_id: "12",
  candidate_contact_ids: ["12", "13"],
  details: { candidates: 2 },
  status: "open",
  item_id: null,
  occurrence_count: 3,
  first_occurred_at: new Date("2026-01-01T00:00:00Z"),
  last_occurred_at: new Date("2026-01-02T00:00:00Z"),
  previous_number: "41",
  correlation_id: "00000000-0000-4000-8000-000000000002",
};

test("every alerts.fields key is filled by the mirror", (t) => {
  const fields = Object.fromEntries(ALERT_FIELD_NAMES.map((k, i) => [k, `ufCrm14_${1000 + i}`]));
  const s = testSettings({ ...DEFAULT_ALERT_SETTINGS, "alerts.fields": fields }).alerts;
  const out = alertItemFields(row, s);
  for (const [key, field] of Object.entries(fields)) t.true(field in out, `${key} -> ${field}`);
  t.is(out.ufCrm14_1000, 42, "alert_number");
  t.is(out.title, alertTitle(row));
});

test("an unanswered add is looked up by alert number, else fingerprint, else title", (t) => {
  // Settings that mirror alerts name every item field (the schema refuses others), so these keep
  // the fallbacks reachable by building the settings directly.
  const s = (fields: Record<string, string>) => ({
    ...testSettings({ "alerts.entity_type_id": 1040, "alerts.database_only": true }).alerts,
    fields,
  });
  t.deepEqual(lookupMatch(row, s({ alert_number: "ufCrm14_1", fingerprint: "ufCrm14_2" })), {
    field: "ufCrm14_1",
    value: 42,
  });
  t.deepEqual(lookupMatch(row, s({ fingerprint: "ufCrm14_2" })), {
    field: "ufCrm14_2",
    value: row.fingerprint,
  });
  t.deepEqual(lookupMatch(row, s({})), { field: "title", value: "Sync conflict #42: duplicate_contacts" });
});
