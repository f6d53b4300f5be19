// Drift between the settings catalogue (bitrix_sync.settings, the owner of keys, types, bounds and
// defaults) and the service's one schema (src/settings-schema.ts): a catalogue change without the
// schema change, or the other way round, fails here.
import test from "ava";
import { z } from "zod";
import { parseSettings, SettingsSchema, settingKey } from "../../src/settings-schema.js";
import { DEFAULT_ALERT_SETTINGS } from "../../tools/emulator/store.js";
import { CATALOGUE_DEFAULTS } from "../helpers/settings.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

/** A catalogue row as the schema describes it. */
interface Described {
  key: string;
  value_type: string;
  min_value: number | null;
  max_value: number | null;
  allowed_values: string[] | null;
  max_length: number | null;
  nullable: boolean;
}

const bound = (v: number | null | undefined) =>
  v === null || v === undefined || !Number.isFinite(v) || Math.abs(v) >= Number.MAX_SAFE_INTEGER ? null : v;

/** Reads type, bounds, allowed values and nullability back out of one leaf of the schema. */
function describe(key: string, leaf: z.ZodType): Described {
  const nullable = leaf instanceof z.ZodNullable;
  const inner = (nullable ? (leaf as z.ZodNullable<z.ZodType>).unwrap() : leaf) as z.ZodType;
  const base = { key, nullable, min_value: null, max_value: null, allowed_values: null, max_length: null };
  if (inner instanceof z.ZodNumber) {
    return {
      ...base,
      value_type: inner.isInt ? "integer" : "number",
      min_value: bound(inner.minValue),
      max_value: bound(inner.maxValue),
    };
  }
  // The catalogue's text type means a non-empty string (_settings_errors) of at most max_length.
  if (inner instanceof z.ZodString && inner.minLength === 1) {
    return { ...base, value_type: "text", max_length: inner.maxLength };
  }
  if (inner instanceof z.ZodEnum) {
    return { ...base, value_type: "enum", allowed_values: (inner.options as string[]).map(String).sort() };
  }
  // json: an object of some allowed keys, each a non-empty string of at most max_length.
  if (inner instanceof z.ZodRecord) {
    const keys =
      inner.keyType instanceof z.ZodEnum ? (inner.keyType.options as string[]).map(String).sort() : null;
    const value = inner.valueType;
    const maxLength = value instanceof z.ZodString && value.minLength === 1 ? value.maxLength : null;
    return { ...base, value_type: "json", allowed_values: keys, max_length: maxLength };
  }
  if (inner instanceof z.ZodBoolean) return { ...base, value_type: "boolean" };
  throw new Error(`${key}: a schema type the catalogue has no name for`);
}

function schemaRows(): Described[] {
  const out: Described[] = [];
  for (const [group, g] of Object.entries(SettingsSchema.shape)) {
    for (const [name, leaf] of Object.entries((g as z.ZodObject).shape)) {
      out.push(describe(settingKey([group, name]), leaf as z.ZodType));
    }
  }
  return out.sort((a, b) => a.key.localeCompare(b.key));
}

async function catalogueRows(): Promise<Described[]> {
  const { rows } = await db.pool.query<{
    key: string;
    value_type: string;
    min_value: string | null;
    max_value: string | null;
    allowed_values: unknown[] | null;
    max_length: number | null;
    nullable: boolean;
  }>(
    "select key, value_type, min_value, max_value, allowed_values, max_length, nullable from bitrix_sync.settings",
  );
  return rows
    .map((r) => ({
      key: r.key,
      value_type: r.value_type,
      min_value: r.min_value === null ? null : Number(r.min_value),
      max_value: r.max_value === null ? null : Number(r.max_value),
      // Their order carries no meaning (zod's enum lists numeric-looking values first).
      allowed_values: r.allowed_values === null ? null : r.allowed_values.map(String).sort(),
      max_length: r.max_length,
      nullable: r.nullable,
    }))
    .sort((a, b) => a.key.localeCompare(b.key));
}

test("the schema's keys are exactly the catalogue's rows", async (t) => {
  const { rows } = await db.pool.query<{ key: string }>("select key from bitrix_sync.settings order by key");
  t.deepEqual(
    schemaRows().map((r) => r.key),
    rows.map((r) => r.key).sort((a, b) => a.localeCompare(b)),
  );
});

test("each key's type, bounds, allowed values and nullability in the schema equal its catalogue row", async (t) => {
  const catalogue = new Map((await catalogueRows()).map((r) => [r.key, r]));
  for (const row of schemaRows()) t.deepEqual(row, catalogue.get(row.key), row.key);
});

test("active_settings() of a fresh database parses, and the test fixture equals it", async (t) => {
  const { rows } = await db.pool.query<{ s: Record<string, unknown> }>(
    "select bitrix_sync.active_settings() as s",
  );
  const active = rows[0]?.s ?? {};
  const parsed = parseSettings(active);
  t.true(parsed.ok, parsed.ok ? "" : parsed.errors.join("; "));
  t.is(parsed.version, 1);
  const { _version, ...values } = active;
  t.deepEqual(CATALOGUE_DEFAULTS, values, "test/helpers/catalogue-defaults.json is out of date");
});

test("the schema accepts exactly what the database's validation accepts, at and around every bound", async (t) => {
  const probes: Array<[string, unknown]> = [];
  for (const row of await catalogueRows()) {
    const k = row.key;
    probes.push([k, null], [k, "text"], [k, true], [k, {}], [k, [1]]);
    if (row.value_type === "integer" || row.value_type === "number") {
      const step = row.value_type === "integer" ? 1 : 0.001;
      if (row.min_value !== null) probes.push([k, row.min_value], [k, row.min_value - step]);
      if (row.max_value !== null) probes.push([k, row.max_value], [k, row.max_value + step]);
      probes.push([k, (row.min_value ?? 0) + 0.5]);
    }
    if (row.value_type === "text") {
      probes.push([k, ""], [k, "STAGE:1"]);
      if (row.max_length !== null)
        probes.push([k, "S".repeat(row.max_length)], [k, "S".repeat(row.max_length + 1)]);
    }
    if (row.value_type === "json") {
      const [first] = row.allowed_values ?? [];
      probes.push(
        [k, { unknown_entry: "ufCrm1_x" }],
        [k, { [String(first)]: 1 }],
        [k, { [String(first)]: "" }],
      );
      if (row.max_length !== null) {
        probes.push([k, { [String(first)]: "f".repeat(row.max_length) }]);
        probes.push([k, { [String(first)]: "f".repeat(row.max_length + 1) }]);
      }
    } else {
      for (const v of row.allowed_values ?? []) probes.push([k, v]);
    }
  }
  probes.push(["retry.base_ms", 300_000], ["retry.base_ms", 300_001]);
  probes.push(
    ["retention.commands_days", 90],
    ["retention.commands_days", 91],
    ["retention.workflows_days", 30],
    ["retention.workflows_days", 29],
  );
  for (const [key, value] of probes) {
    const changes = { [key]: value };
    const { rows } = await db.pool.query<{ e: string[] }>("select bitrix_sync._settings_errors($1) as e", [
      JSON.stringify(changes),
    ]);
    const sqlAccepts = (rows[0]?.e ?? []).length === 0;
    const tsAccepts = parseSettings({ ...CATALOGUE_DEFAULTS, ...changes }).ok;
    t.is(tsAccepts, sqlAccepts, `${key} = ${JSON.stringify(value)}: SQL ${JSON.stringify(rows[0]?.e)}`);
  }
});

test("the alert smart process's rules across keys say the same, in the same words, in SQL and in the schema", async (t) => {
  const full = DEFAULT_ALERT_SETTINGS;
  const fields = full["alerts.fields"];
  const { alert_number: _, occurrence_count: __, ...withoutTwo } = fields;
  const cases: Array<[string, Record<string, unknown>, string[]]> = [
    ["the emulator's smart process, complete", full, []],
    [
      "resolved equal to new",
      { ...full, "alerts.stage_resolved": full["alerts.stage_new"] },
      ["alerts.stage_resolved: a terminal stage must differ from alerts.stage_new"],
    ],
    [
      "both terminal stages alike, and equal to in progress",
      {
        ...full,
        "alerts.stage_in_progress": "DT1040_7:FAIL",
        "alerts.stage_resolved": "DT1040_7:FAIL",
      },
      [
        "alerts.stage_closed_without_resolution: a terminal stage must differ from alerts.stage_in_progress",
        "alerts.stage_closed_without_resolution: a terminal stage must differ from alerts.stage_resolved",
        "alerts.stage_resolved: a terminal stage must differ from alerts.stage_in_progress",
      ],
    ],
    [
      "stages alike even while alerts are not configured",
      { "alerts.stage_new": "S", "alerts.stage_closed_without_resolution": "S" },
      ["alerts.stage_closed_without_resolution: a terminal stage must differ from alerts.stage_new"],
    ],
    [
      "an entity type and nothing else",
      { "alerts.entity_type_id": 1040 },
      [
        "alerts.fields: required while alerts.entity_type_id is set (§11 item fields); missing alert_number, candidate_contact_ids, correlation_id, current_contact_id, details, fingerprint, first_occurred_at, last_occurred_at, occurrence_count, previous_alert_number, selected_contact_id, severity, type, user_id",
        "alerts.stage_closed_without_resolution: required while alerts.entity_type_id is set (or set alerts.database_only to keep alerts in the database)",
        "alerts.stage_new: required while alerts.entity_type_id is set (or set alerts.database_only to keep alerts in the database)",
        "alerts.stage_resolved: required while alerts.entity_type_id is set (or set alerts.database_only to keep alerts in the database)",
      ],
    ],
    [
      "an entity type kept in the database",
      { "alerts.entity_type_id": 1040, "alerts.database_only": true },
      [],
    ],
    [
      "two item fields missing",
      { ...full, "alerts.fields": withoutTwo },
      [
        "alerts.fields: required while alerts.entity_type_id is set (§11 item fields); missing alert_number, occurrence_count",
      ],
    ],
    [
      "a field that is not a smart-process field, and two entries naming one field",
      {
        ...full,
        "alerts.fields": {
          ...fields,
          type: "UF_CRM_14_1004",
          severity: fields.details,
          user_id: fields.details,
        },
      },
      [
        "alerts.fields: entries details, severity, user_id name the same field; each needs its own",
        "alerts.fields: entry type must name a smart-process field (ufCrm<type>_<name>)",
      ],
    ],
  ];
  for (const [name, changes, expected] of cases) {
    const { rows } = await db.pool.query<{ e: string[] }>("select bitrix_sync._settings_errors($1) as e", [
      JSON.stringify(changes),
    ]);
    const sql = (rows[0]?.e ?? []).sort();
    const parsed = parseSettings({ ...CATALOGUE_DEFAULTS, ...changes });
    const ts = (parsed.ok ? [] : parsed.errors).sort();
    t.deepEqual(sql, [...expected].sort(), `${name}: SQL`);
    t.deepEqual(ts, sql, `${name}: the schema`);
  }
});
