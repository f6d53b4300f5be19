// The hot settings (§12.3) as the service reads them: one zod schema of the whole active settings
// object. The catalogue (bitrix_sync.settings, sql/settings.sql) owns the keys, types, bounds and
// defaults; this schema repeats the types and bounds so a value outside them can never reach a
// consumer, and has no defaults of its own: bitrix_sync.active_settings() fills every key from the
// catalogue. test/integration/settings-schema.test.ts keeps the two equal.
//
// A catalogue key `group.snake_name` is `settings.group.camelName` here: "batch.max_wait_ms" is
// `s.batch.maxWaitMs`, "alerts.stage_closed_without_resolution" is `s.alerts.stageClosedWithoutResolution`.
import { z } from "zod";

/** The largest int4: every integer setting is read as one (in SQL too). */
const INT4_MAX = 2_147_483_647;

/** A whole number in [min, max]; the catalogue's `integer` type. */
const int = (min: number, max: number) => z.number().int().min(min).max(max);
/** Any number in [min, max]; the catalogue's `number` type. */
const num = (min: number, max: number) => z.number().min(min).max(max);
/** A non-empty string of at most `maxLength` characters; the catalogue's `text` type. */
const text = (maxLength: number) => z.string().min(1).max(maxLength);
/**
 * An object of some of the allowed `keys`, each a non-empty string of at most `maxLength`
 * characters; the catalogue's `json` type (allowed_values are its keys).
 */
const json = <K extends string>(keys: readonly [K, ...K[]], maxLength: number) =>
  z.partialRecord(z.enum(keys), z.string().min(1).max(maxLength));

/** The logical alert fields alerts.fields may name (src/workflows/alert-sync.ts fills them). */
export const ALERT_FIELD_NAMES = [
  "alert_number",
  "candidate_contact_ids",
  "correlation_id",
  "current_contact_id",
  "details",
  "fingerprint",
  "first_occurred_at",
  "last_occurred_at",
  "occurrence_count",
  "previous_alert_number",
  "selected_contact_id",
  "severity",
  "type",
  "user_id",
] as const;

/**
 * The kinds of silent drift the convergence audit finds (src/audit/, sql/convergence_audit.sql); the
 * CHECK on bitrix_sync.drift_findings.kind and the audit.auto_repair_kinds entries name the same set.
 */
const DRIFT_KINDS = [
  "contact_missing",
  "crm_master_behind",
  "inactive_user_linked",
  "phone_missing",
  "registered_inactive_user",
  "registered_unknown_user",
  "registered_wrong",
  "unmapped_user",
  "user_id_wrong",
] as const;
export type DriftKind = (typeof DRIFT_KINDS)[number];

/** A smart-process user field name, as the mirror writes it (src/alerts/mirror.ts). */
const ALERT_FIELD_NAME = /^ufCrm[0-9]*_[A-Za-z0-9_]+$/;

const ALERT_OPEN_STAGES = ["stageNew", "stageInProgress"] as const;
const ALERT_TERMINAL_STAGES = ["stageResolved", "stageClosedWithoutResolution"] as const;
/** The stages the mirror and the alert refresh cannot work without (§11). */
const ALERT_REQUIRED_STAGES = ["stageNew", "stageResolved", "stageClosedWithoutResolution"] as const;

type AlertStage = (typeof ALERT_OPEN_STAGES)[number] | (typeof ALERT_TERMINAL_STAGES)[number];

interface AlertValues {
  entityTypeId: number | null;
  databaseOnly: boolean;
  fields: Partial<Record<(typeof ALERT_FIELD_NAMES)[number], string>>;
  stageNew: string | null;
  stageInProgress: string | null;
  stageResolved: string | null;
  stageClosedWithoutResolution: string | null;
}

/**
 * The alert smart process's rules across keys (§11), in the words of the catalogue's
 * `_alert_settings_errors` (sql/settings.sql; test/integration/settings-schema.test.ts keeps both
 * equal): terminal stages differ from each other and from the open ones (a resolved stage equal to
 * the new one would close every new item at the next poll); alerts.fields names smart-process
 * fields, one per entry; while alerts go to the smart process (entity type set, not database-only)
 * the new and both terminal stages and every item field are named. `path` is the key's name in
 * this schema.
 */
function alertSettingsIssues(a: AlertValues): Array<{ path: string; message: string }> {
  const out: Array<{ path: string; message: string }> = [];
  const key = (name: string) => settingKey(["alerts", name]);
  const order: AlertStage[] = [...ALERT_OPEN_STAGES, ...ALERT_TERMINAL_STAGES];
  for (const terminal of ALERT_TERMINAL_STAGES) {
    const value = a[terminal];
    if (value === null) continue;
    for (const other of order.slice(0, order.indexOf(terminal))) {
      if (a[other] === value) {
        out.push({ path: terminal, message: `a terminal stage must differ from ${key(other)}` });
      }
    }
  }
  const entries = Object.entries(a.fields)
    .filter((e): e is [string, string] => typeof e[1] === "string")
    .sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
  for (const [logical, field] of entries) {
    if (!ALERT_FIELD_NAME.test(field)) {
      out.push({
        path: "fields",
        message: `entry ${logical} must name a smart-process field (ufCrm<type>_<name>)`,
      });
    }
  }
  const byField = new Map<string, string[]>();
  for (const [logical, field] of entries) byField.set(field, [...(byField.get(field) ?? []), logical]);
  const shared = [...byField.values()].filter((l) => l.length > 1).map((l) => l.join(", "));
  for (const list of shared.sort()) {
    out.push({ path: "fields", message: `entries ${list} name the same field; each needs its own` });
  }
  if (a.entityTypeId !== null && !a.databaseOnly) {
    for (const stage of ALERT_REQUIRED_STAGES) {
      if (a[stage] === null) {
        out.push({
          path: stage,
          message:
            "required while alerts.entity_type_id is set (or set alerts.database_only to keep alerts in the database)",
        });
      }
    }
    const missing = ALERT_FIELD_NAMES.filter((n) => a.fields[n] === undefined);
    if (missing.length > 0) {
      out.push({
        path: "fields",
        message: `required while alerts.entity_type_id is set (§11 item fields); missing ${[...missing].sort().join(", ")}`,
      });
    }
  }
  return out;
}

export const SettingsSchema = z.object({
  alerts: z
    .object({
      categoryId: int(0, INT4_MAX).nullable(),
      /** Alerts stay in the database: no smart-process item is made or changed. */
      databaseOnly: z.boolean(),
      entityTypeId: int(128, INT4_MAX).nullable(),
      /** Logical alert field -> smart-process field name (ufCrm<type>_...). */
      fields: json(ALERT_FIELD_NAMES, 64),
      reconcileIntervalSec: int(60, 86_400),
      responsibleId: int(1, INT4_MAX).nullable(),
      slaHours: int(1, 720),
      stageClosedWithoutResolution: text(64).nullable(),
      stageInProgress: text(64).nullable(),
      stageNew: text(64).nullable(),
      stageResolved: text(64).nullable(),
    })
    // The catalogue's cross-field rules of the alert smart process (_alert_settings_errors).
    .superRefine((a, ctx) => {
      for (const i of alertSettingsIssues(a))
        ctx.addIssue({ code: "custom", path: [i.path], message: i.message });
    }),
  audit: z.object({
    /** Kind -> "on" (repaired after each run) or "off"; a json entry, so a string of 1..3 characters. */
    autoRepairKinds: z.partialRecord(
      z.enum(DRIFT_KINDS),
      z
        .string()
        .min(1)
        .max(3)
        .refine((v) => v === "on" || v === "off", { message: 'must be "on" or "off"' }),
    ),
    budgetShare: num(0.001, 0.5),
    enabled: z.boolean(),
    graceSec: int(0, 86_400),
    intervalSec: int(60, 86_400),
    leaseSec: int(60, 86_400),
    periodDays: int(1, 90),
    runBudgetSec: int(10, 3600),
    /** Read by SQL (refresh_user_drift, sql/convergence_audit.sql); here for the drift test and status. */
    usersPerRun: int(1, 10_000_000),
  }),
  batch: z.object({ maxWaitMs: int(1, 60_000), size: int(1, 50) }),
  citizenship: z.object({ cacheTtlSec: int(10, 604_800) }),
  /**
   * The forms of the portal's REST contract the reference leaves open (src/crm/contact-fields.ts,
   * ContractForms); preflight's write probe names the value to set when the portal wants another.
   */
  contract: z.object({
    dateFilter: z.enum(["offset", "no_offset"]),
    registeredFilter: z.enum(["1", "Y"]),
    registeredWrite: z.enum(["1", "Y"]),
  }),
  claim: z.object({ size: int(1, 1000) }),
  health: z.object({ crmStaleSec: int(30, 86_400) }),
  lease: z.object({ ttlSec: int(5, 3600) }),
  limiter: z.object({ burst: int(1, 250), maxInFlight: int(1, 50), refillPerSec: num(0.01, 50) }),
  /** Read by SQL (bitrix_sync.hold_phone_link, sql/held_links.sql); here for the drift test and status. */
  mapping: z.object({ holdAfterPhoneLink: z.boolean() }),
  reconcile: z.object({
    contactsIntervalSec: int(60, 86_400),
    leaseSec: int(60, 86_400),
    openedFilter: z.enum(["Y", "N", "1", "0"]),
    overlapSec: int(0, 3600),
    recoveredSpikeRatio: num(0, 1),
    recoveredSpikeThreshold: int(1, 100_000),
  }),
  retention: z
    .object({
      batchSize: int(10, 5000),
      commandsDays: int(1, 3650),
      enabled: z.boolean(),
      queueDays: int(1, 3650),
      runBudgetSec: int(1, 3000),
      webhooksDays: int(1, 3650),
      workflowsDays: int(1, 3650),
    })
    // The catalogue's cross-field rule (_settings_errors): a workflow goes only after its commands.
    .refine((r) => r.commandsDays <= r.workflowsDays, {
      path: ["commandsDays"],
      message: "must not exceed retention.workflows_days",
    }),
  retry: z
    .object({ baseMs: int(10, 600_000), horizonSec: int(60, 604_800), maxMs: int(100, 86_400_000) })
    // The catalogue's cross-field rule (_settings_errors).
    .refine((r) => r.baseMs <= r.maxMs, { path: ["baseMs"], message: "must not exceed retry.max_ms" }),
  worker: z.object({ pollIntervalMs: int(100, 5000) }),
});

/** The active settings, typed: read a key as `s.group.camelName` (e.g. `s.batch.size`). */
export type Settings = z.infer<typeof SettingsSchema>;

/** "batch.max_wait_ms" -> ["batch", "maxWaitMs"]. */
export function settingPath(key: string): string[] {
  return key.split(".").map((part) => part.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()));
}

/** ["batch", "maxWaitMs"] -> "batch.max_wait_ms" (the catalogue's key). */
export function settingKey(path: readonly PropertyKey[]): string {
  return path.map((p) => String(p).replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)).join(".");
}

export type ParsedSettings =
  | { ok: true; version: number | null; settings: Settings }
  | { ok: false; version: number | null; errors: string[] };

/**
 * Parses what bitrix_sync.active_settings() returns (catalogue keys plus `_version`). Keys the
 * schema does not know are ignored, so a catalogue that gained a key ahead of this code still
 * parses; a missing key or a value outside the schema fails. Errors name catalogue keys and say
 * what is wrong, never the value.
 */
export function parseSettings(active: unknown): ParsedSettings {
  const flat = active !== null && typeof active === "object" && !Array.isArray(active) ? active : {};
  const { _version: v, ...values } = flat as Record<string, unknown>;
  const version = typeof v === "number" ? v : null;
  // Every group present, so a missing key is reported under its own name rather than its group's.
  const nested: Record<string, Record<string, unknown>> = Object.fromEntries(
    Object.keys(SettingsSchema.shape).map((g) => [g, {}]),
  );
  for (const [key, value] of Object.entries(values)) {
    const [group, name, ...rest] = settingPath(key);
    if (group === undefined || name === undefined || rest.length > 0) continue;
    nested[group] ??= {};
    nested[group][name] = value;
  }
  const r = SettingsSchema.safeParse(nested);
  if (r.success) return { ok: true, version, settings: r.data };
  return {
    ok: false,
    version,
    errors: r.error.issues.map((i) => `${settingKey(i.path) || "settings"}: ${i.message}`),
  };
}
