// Preflight, portal (§13, §10.2): through the service's own CRM client, read-only calls only. The
// credential and its scopes (`scope`, `method.get`), the three Contact fields
// (crm.contact.userfield.list), the alert smart process (crm.item.fields, crm.category.list,
// crm.status.list), the Contact workflow (bizproc.workflow.template.list, when the webhook may read
// it), the member ID's form, and three contract probes whose findings an operator may need to turn
// into settings: DATE_MODIFY against updatedTime, the registration flag's wire form, and what the
// reconcile.opened_filter value returns. What only a write can settle is ./probe.ts's.
import { timingSafeEqual } from "node:crypto";
import type { Config } from "../config/env.js";
import { toRestFieldName } from "../config/fields.js";
import { COMMAND_TYPES, methodOf } from "../crm/catalogue.js";
import { type CrmClient, createCrmClient } from "../crm/client.js";
import { decodeRegistered } from "../crm/contact-fields.js";
import type { Settings } from "../settings-schema.js";
import { type CheckResult, check, notChecked } from "./types.js";

/** Every REST method the service calls: the catalogue's, and batch, which carries them. */
export function serviceMethods(): string[] {
  return [...new Set(["batch", ...COMMAND_TYPES.map(methodOf)])].sort();
}

type Rest =
  | { ok: true; result: unknown; total?: number }
  | { ok: false; kind: "credential" | "refused" | "network"; code: string; status: number };

async function rest(client: CrmClient, method: string, params: object): Promise<Rest> {
  const r = await client.call(method, params);
  if (r.type === "network") return { ok: false, kind: "network", code: r.code, status: 0 };
  if (r.type === "malformed")
    return { ok: false, kind: "refused", code: "MALFORMED_REPLY", status: r.status };
  const body = (r.body ?? {}) as Record<string, unknown>;
  if (r.status === 200 && "result" in body) {
    return {
      ok: true,
      result: body.result,
      ...(typeof body.total === "number" ? { total: body.total } : {}),
    };
  }
  const code = typeof body.error === "string" && /^[A-Za-z0-9_]{1,64}$/.test(body.error) ? body.error : "";
  const kind =
    r.status === 401 || code === "NO_AUTH_FOUND" || code === "INVALID_CREDENTIALS" || code === "expired_token"
      ? "credential"
      : "refused";
  return { ok: false, kind, code: code || `HTTP ${r.status}`, status: r.status };
}

function rec(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

const IDS = [
  "portal.credential",
  "portal.methods",
  "portal.contact_fields",
  "portal.alert_process",
  "portal.contact_workflow",
  "portal.member_id",
  "portal.probe_date_modify",
  "portal.probe_registered_form",
  "portal.probe_opened_filter",
] as const;

/** A Bitrix24 portal's member ID: 32 lowercase hexadecimal characters in every documented sample. */
const MEMBER_ID = /^[0-9a-f]{32}$/;

export async function checkPortal(config: Config, settings: Settings | null): Promise<CheckResult[]> {
  if (config.sandbox) {
    return IDS.map((id) =>
      notChecked(
        id,
        "no CRM webhook is configured (sandbox mode)",
        "provide the BITRIX_SYNC_CRM_REST_WEBHOOK_URL secret and BITRIX_SYNC_PORTAL_HOST",
      ),
    );
  }
  const client = createCrmClient({
    webhookUrl: config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL as string,
    portalHost: config.env.BITRIX_SYNC_PORTAL_HOST as string,
    timeoutMs: config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC * 1000,
    userAgent: "bitrix-sync-preflight/0.1",
  });
  try {
    return await run(client, config, settings);
  } finally {
    await client.close();
  }
}

async function run(client: CrmClient, config: Config, settings: Settings | null): Promise<CheckResult[]> {
  const host = config.env.BITRIX_SYNC_PORTAL_HOST as string;
  const out: CheckResult[] = [];
  const scope = await rest(client, "scope", {});
  if (!scope.ok) {
    const why =
      scope.kind === "network"
        ? check(
            "portal.credential",
            "unknown",
            `${host} did not answer (${scope.code})`,
            "check the network path to the portal (egress :443, DNS, TLS)",
          )
        : scope.kind === "credential"
          ? check(
              "portal.credential",
              "fail",
              `${host} rejected the webhook credential (${scope.code}, HTTP ${scope.status})`,
              "the incoming webhook was deleted or its URL is wrong: create one for the technical user (§13) and update the BITRIX_SYNC_CRM_REST_WEBHOOK_URL secret",
            )
          : check(
              "portal.credential",
              "fail",
              `${host} refused \`scope\` (${scope.code}, HTTP ${scope.status})`,
              "check the webhook in the portal",
            );
    out.push(why);
    for (const id of IDS.slice(1)) {
      out.push(
        id === "portal.member_id"
          ? memberId(config)
          : notChecked(id, "the portal credential did not pass (portal.credential)"),
      );
    }
    return out;
  }
  const scopes = Array.isArray(scope.result)
    ? scope.result.filter((s): s is string => typeof s === "string")
    : [];
  out.push(
    scopes.includes("crm")
      ? check("portal.credential", "ok", `${host} accepts the webhook; scopes: ${scopes.join(", ")}`)
      : check(
          "portal.credential",
          "fail",
          `the webhook works but lacks the crm scope (scopes: ${scopes.join(", ") || "none"})`,
          "edit the incoming webhook in the portal and give it the crm scope (§13)",
        ),
  );
  // `basic` (scope, method.get, batch) every webhook has; bizproc only lets preflight read the
  // Contact workflow (portal.contact_workflow); anything else beyond crm is too much.
  if (scopes.some((s) => s !== "crm" && s !== "basic" && s !== "bizproc")) {
    out[out.length - 1] = {
      ...(out.at(-1) as CheckResult),
      ...(scopes.includes("crm")
        ? {
            status: "warn" as const,
            hint: "the service needs only crm (§13), and preflight bizproc to read the Contact workflow: remove the other scopes from the webhook",
          }
        : {}),
    };
  }

  out.push(await checkMethods(client));
  out.push(await checkContactFields(client, config));
  out.push(await checkAlertProcess(client, settings, config.env.BITRIX_SYNC_ENABLED === true));
  out.push(await checkContactWorkflow(client, config, scopes));
  out.push(memberId(config));
  out.push(...(await probes(client, config, settings)));
  return out;
}

/** method.get for every method the service calls, in one batch (one request). */
async function checkMethods(client: CrmClient): Promise<CheckResult> {
  const methods = serviceMethods();
  const cmd = Object.fromEntries(
    methods.map((m, i) => [`m${i}`, `method.get?name=${encodeURIComponent(m)}`]),
  );
  const r = await rest(client, "batch", { halt: 0, cmd });
  if (!r.ok)
    return check(
      "portal.methods",
      r.kind === "network" ? "unknown" : "fail",
      `method.get could not be asked (${r.code})`,
      "check the webhook in the portal",
    );
  const results = rec(rec(r.result).result);
  const missing: string[] = [];
  const notAllowed: string[] = [];
  methods.forEach((m, i) => {
    const res = rec(results[`m${i}`]);
    if (res.isExisting !== true) missing.push(m);
    else if (res.isAvailable !== true) notAllowed.push(m);
  });
  if (missing.length > 0 || notAllowed.length > 0) {
    const parts = [];
    if (notAllowed.length > 0) parts.push(`not allowed by the webhook's scopes: ${notAllowed.join(", ")}`);
    if (missing.length > 0) parts.push(`not on this portal: ${missing.join(", ")}`);
    return check(
      "portal.methods",
      "fail",
      parts.join("; "),
      "give the webhook the scopes of these methods (method.get: isAvailable); a missing method means a module is not installed",
    );
  }
  return check(
    "portal.methods",
    "ok",
    `all ${methods.length} methods the service calls are available (${methods.join(", ")}); the technical user's CRM permissions are checked only when a call is made`,
  );
}

const FIELD_RULES = [
  { key: "userId", variable: "BITRIX_SYNC_CONTACT_USER_ID_FIELD", type: "string" },
  { key: "registered", variable: "BITRIX_SYNC_CONTACT_REGISTERED_FIELD", type: "boolean" },
  { key: "citizenship", variable: "BITRIX_SYNC_CONTACT_CITIZENSHIP_FIELD", type: "enumeration" },
] as const;

async function checkContactFields(client: CrmClient, config: Config): Promise<CheckResult> {
  const r = await rest(client, "crm.contact.userfield.list", { order: { ID: "ASC" } });
  if (!r.ok) {
    return check(
      "portal.contact_fields",
      r.kind === "network" ? "unknown" : "fail",
      `crm.contact.userfield.list failed (${r.code})`,
      "the technical user must read the Contact user fields' metadata (§13)",
    );
  }
  const list = Array.isArray(r.result) ? r.result.map(rec) : [];
  const problems: string[] = [];
  const found: string[] = [];
  for (const rule of FIELD_RULES) {
    const name = config.fields[rule.key];
    const f = list.find((x) => x.FIELD_NAME === name);
    if (!f) {
      problems.push(`${rule.variable}=${name} does not exist on the portal`);
      continue;
    }
    const type = String(f.USER_TYPE_ID ?? "");
    if (type !== rule.type) {
      problems.push(`${rule.variable}=${name} is of type ${type || "?"}, needs ${rule.type}`);
      continue;
    }
    if (rule.type === "enumeration") {
      const items = Array.isArray(f.LIST) ? f.LIST.length : 0;
      if (items === 0) {
        problems.push(`${rule.variable}=${name} is a list without items`);
        continue;
      }
      found.push(`${name} enumeration (${items} items)`);
    } else {
      found.push(`${name} ${type}`);
    }
    if (f.MULTIPLE === "Y") problems.push(`${rule.variable}=${name} is multiple; it must hold one value`);
  }
  if (problems.length > 0) {
    return check(
      "portal.contact_fields",
      "fail",
      problems.join("; "),
      "create the field with that type in the portal, or point the variable at the right field (§3.2)",
    );
  }
  return check("portal.contact_fields", "ok", found.join(", "));
}

/**
 * The alert smart process (§11) as the settings name it. Business alerts must reach the portal once
 * sync is enabled: a process that is not configured or not there fails, unless alerts.database_only
 * says they stay in the database on purpose. While sync is still disabled, a missing configuration
 * is a warning (what enabling will demand).
 */
async function checkAlertProcess(
  client: CrmClient,
  settings: Settings | null,
  enabled: boolean,
): Promise<CheckResult> {
  if (settings === null)
    return notChecked("portal.alert_process", "the hot settings could not be read (database.settings)");
  const a = settings.alerts;
  if (a.databaseOnly) {
    return check(
      "portal.alert_process",
      "warn",
      "alerts.database_only is true: business alerts stay in the database (bitrix_sync.status_alerts) and no smart-process item is made",
      "managers see no conflict in the CRM this way; set the smart process (docs/configuration.md) and alerts.database_only false to mirror them",
    );
  }
  if (a.entityTypeId === null) {
    return check(
      "portal.alert_process",
      enabled ? "fail" : "warn",
      enabled
        ? "BITRIX_SYNC_ENABLED=true but alerts.entity_type_id is not set: business alerts cannot reach the portal"
        : "alerts.entity_type_id is not set: business alerts could not reach the portal once sync is enabled",
      "set the alert smart process (alerts.entity_type_id, its category, stages and every field, docs/configuration.md), or alerts.database_only true to keep alerts in the database on purpose",
    );
  }
  const t = a.entityTypeId;
  const fieldsR = await rest(client, "crm.item.fields", { entityTypeId: t });
  if (!fieldsR.ok) {
    return check(
      "portal.alert_process",
      fieldsR.kind === "network" ? "unknown" : "fail",
      `smart process ${t} (alerts.entity_type_id) cannot be read (${fieldsR.code})`,
      "create the alert smart process, or set alerts.entity_type_id to its entityTypeId; the technical user needs access to it (§13)",
    );
  }
  const problems: string[] = [];
  const fields = rec(rec(fieldsR.result).fields);
  for (const [logical, name] of Object.entries(a.fields)) {
    if (name !== undefined && !(name in fields))
      problems.push(`field ${name} (alerts.fields.${logical}) does not exist`);
  }
  const catR = await rest(client, "crm.category.list", { entityTypeId: t });
  let categoryId = a.categoryId;
  if (catR.ok) {
    const cats = (
      Array.isArray(rec(catR.result).categories) ? (rec(catR.result).categories as unknown[]) : []
    ).map(rec);
    if (categoryId === null) categoryId = Number(cats.find((c) => c.isDefault === "Y")?.id ?? 0);
    else if (!cats.some((c) => Number(c.id) === categoryId))
      problems.push(`category ${categoryId} (alerts.category_id) does not exist`);
  } else {
    problems.push(`crm.category.list failed (${catR.code})`);
  }
  const stageR = await rest(client, "crm.status.list", {
    filter: { ENTITY_ID: `DYNAMIC_${t}_STAGE_${categoryId ?? 0}` },
  });
  if (stageR.ok) {
    const stages = new Set((Array.isArray(stageR.result) ? stageR.result : []).map((s) => rec(s).STATUS_ID));
    const wanted: Array<[string, string | null]> = [
      ["alerts.stage_new", a.stageNew],
      ["alerts.stage_in_progress", a.stageInProgress],
      ["alerts.stage_resolved", a.stageResolved],
      ["alerts.stage_closed_without_resolution", a.stageClosedWithoutResolution],
    ];
    for (const [key, stage] of wanted) {
      if (stage !== null && !stages.has(stage))
        problems.push(`stage ${stage} (${key}) is not a stage of category ${categoryId}`);
    }
  } else {
    problems.push(`crm.status.list failed (${stageR.code})`);
  }
  if (problems.length > 0) {
    return check(
      "portal.alert_process",
      "fail",
      `smart process ${t}: ${problems.join("; ")}`,
      "make the settings name what exists in the portal (docs/admin.md), or create what is missing",
    );
  }
  return check(
    "portal.alert_process",
    "ok",
    `smart process ${t}, category ${categoryId}, ${Object.keys(a.fields).length} field(s) and the configured stages exist`,
  );
}

/** What fires the Contact receiver on a real portal (reference §10): a workflow template for Contacts. */
const CONTACT_DOCUMENT = {
  MODULE_ID: "crm",
  ENTITY: "CCrmDocumentContact",
  DOCUMENT_TYPE: "CONTACT",
} as const;
/** AUTO_EXECUTE flags (api-reference/bizproc/template): 1 on create, 2 on change, 3 both. */
const ON_CREATE = 1;
const ON_CHANGE = 2;
const CONTACT_ROUTE = "/bitrix/sync/webhook/contact";

/** Every Handler of a WebHookActivity anywhere in a template's activity tree. */
function webhookHandlers(tree: unknown, out: string[] = []): string[] {
  if (Array.isArray(tree)) {
    for (const t of tree) webhookHandlers(t, out);
  } else if (tree !== null && typeof tree === "object") {
    const a = tree as Record<string, unknown>;
    const handler = rec(a.Properties).Handler;
    if (String(a.Type ?? "").toLowerCase() === "webhookactivity" && typeof handler === "string")
      out.push(handler);
    for (const v of Object.values(a)) if (v !== null && typeof v === "object") webhookHandlers(v, out);
  }
  return out;
}

function sameSecret(a: string, b: string | undefined): boolean {
  if (b === undefined) return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * Whether one webhook URL is the Contact receiver's, as the receiver checks it (src/inbound/contract.ts):
 * the public URL's route, the current or previous token, an ID parameter. Returns what is wrong, or
 * null. Says nothing of the token's value.
 */
function handlerProblem(handler: string, config: Config): string | null {
  let u: URL;
  try {
    u = new URL(handler);
  } catch {
    return "its URL is not a URL";
  }
  const base = config.env.BITRIX_SYNC_PUBLIC_BASE_URL;
  const expected = base ? new URL(CONTACT_ROUTE, base) : null;
  if (
    expected ? u.origin !== expected.origin || u.pathname !== expected.pathname : u.pathname !== CONTACT_ROUTE
  )
    return `it posts elsewhere than ${expected ? expected.toString() : `a URL ending in ${CONTACT_ROUTE}`}`;
  const tokens = u.searchParams.getAll("token");
  const s = config.secrets;
  if (tokens.length !== 1) return "its URL has no token parameter (or more than one)";
  if (
    !sameSecret(tokens[0] as string, s.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN) &&
    !sameSecret(tokens[0] as string, s.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN_PREVIOUS)
  )
    return "its token is neither the current nor the previous Contact receiver token";
  if (!u.searchParams.has("ID")) return "its URL has no ID parameter (the document's ID)";
  return null;
}

/**
 * The Contact workflow (reference §10; docs/portal-setup.md): a business process template for
 * Contacts that starts on create and on change and posts to the Contact receiver. Read with
 * bizproc.workflow.template.list, which needs the bizproc scope and an administrator; without either
 * the check says so and is not counted as passed.
 */
async function checkContactWorkflow(
  client: CrmClient,
  config: Config,
  scopes: string[],
): Promise<CheckResult> {
  const id = "portal.contact_workflow";
  const byHand =
    "or check by hand that a Contact workflow starts on create and on change and posts to the Contact receiver (docs/portal-setup.md)";
  if (!scopes.includes("bizproc")) {
    return notChecked(
      id,
      "the webhook lacks the bizproc scope, which bizproc.workflow.template.list needs",
      `give the incoming webhook the bizproc scope (only preflight uses it) ${byHand}`,
    );
  }
  const r = await rest(client, "bizproc.workflow.template.list", {
    select: ["ID", "NAME", "MODULE_ID", "ENTITY", "DOCUMENT_TYPE", "AUTO_EXECUTE", "TEMPLATE"],
    filter: CONTACT_DOCUMENT,
    order: { ID: "ASC" },
  });
  if (!r.ok) {
    return r.code === "ACCESS_DENIED"
      ? notChecked(
          id,
          "bizproc.workflow.template.list answers administrators only (ACCESS_DENIED), and the webhook's user is not one",
          `run preflight once with an administrator's webhook (crm and bizproc), ${byHand}`,
        )
      : notChecked(id, `bizproc.workflow.template.list failed (${r.code})`, byHand);
  }
  const contactType = (t: Record<string, unknown>) => {
    const d = t.DOCUMENT_TYPE;
    if (Array.isArray(d)) return d[0] === "crm" && d[1] === CONTACT_DOCUMENT.ENTITY && d[2] === "CONTACT";
    return (
      (t.ENTITY === undefined || t.ENTITY === CONTACT_DOCUMENT.ENTITY) && (d === undefined || d === "CONTACT")
    );
  };
  const templates = (Array.isArray(r.result) ? r.result : []).map(rec).filter(contactType);
  if (templates.length === 0) {
    return check(
      id,
      "fail",
      "no workflow template for Contacts: nothing tells the service when a manager changes a Contact (only reconciliation brings such edits back, every reconcile.contacts_interval_sec)",
      "create the Contact workflow (docs/portal-setup.md): started on create and on change, with a Webhook activity posting to the Contact receiver",
    );
  }
  const found: Array<{ id: string; auto: number; problem: string | null }> = [];
  for (const t of templates) {
    const auto = Number(t.AUTO_EXECUTE ?? 0);
    for (const h of webhookHandlers(t.TEMPLATE))
      found.push({ id: String(t.ID), auto, problem: handlerProblem(h, config) });
  }
  const receiver = found.filter((f) => f.problem === null || !f.problem.startsWith("it posts elsewhere"));
  const good = receiver.find(
    (f) => f.problem === null && (f.auto & ON_CREATE) !== 0 && (f.auto & ON_CHANGE) !== 0,
  );
  if (good) {
    return check(
      id,
      "ok",
      `Contact workflow template ${good.id} starts on create and on change (AUTO_EXECUTE ${good.auto}) and posts to the Contact receiver with a current token and the ID; ${templates.length} Contact template(s) in all`,
    );
  }
  if (receiver.length > 0) {
    const f = receiver[0] as (typeof receiver)[number];
    const starts = [
      (f.auto & ON_CREATE) !== 0 ? "on create" : null,
      (f.auto & ON_CHANGE) !== 0 ? "on change" : null,
    ]
      .filter((x) => x !== null)
      .join(" and ");
    const problems = [
      ...(f.problem ? [f.problem] : []),
      ...((f.auto & 3) !== 3
        ? [`it starts ${starts || "only by hand"} (AUTO_EXECUTE ${f.auto}), not on create and on change`]
        : []),
    ];
    return check(
      id,
      "fail",
      `Contact workflow template ${f.id} posts to the Contact receiver, but ${problems.join("; ")}`,
      "edit the workflow (docs/portal-setup.md): auto-start on create and on change; the URL with the current Contact receiver token and ID",
    );
  }
  return notChecked(
    id,
    `${templates.length} Contact workflow template(s), none with a Webhook activity posting to the Contact receiver that preflight could find (the template's structure is not documented)`,
    `add the Webhook activity (docs/portal-setup.md), ${byHand}`,
  );
}

/**
 * The member ID cannot be read through a webhook: no REST method returns it to one (app.info needs an
 * application context and has no member ID either). Its form is checked; its value is confirmed only
 * by the robots' requests (auth[member_id]) — a mismatch makes the receivers answer 403.
 */
function memberId(config: Config): CheckResult {
  const v = config.env.BITRIX_SYNC_PORTAL_MEMBER_ID;
  if (v === undefined) {
    return check(
      "portal.member_id",
      "fail",
      "BITRIX_SYNC_PORTAL_MEMBER_ID is not set",
      "set it to auth[member_id] of the portal's robot requests",
    );
  }
  if (!MEMBER_ID.test(v)) {
    return check(
      "portal.member_id",
      "fail",
      `BITRIX_SYNC_PORTAL_MEMBER_ID does not look like a portal member ID (${v.length} characters; a member ID is 32 lowercase hexadecimal characters)`,
      "copy auth[member_id] from one robot request of the portal (docs/receivers.md); the receivers refuse any other (403 portal_member)",
    );
  }
  return check(
    "portal.member_id",
    "warn",
    "BITRIX_SYNC_PORTAL_MEMBER_ID is well-formed, but the portal cannot confirm it to a webhook (no REST method returns the member ID; app.info needs an application context)",
    'confirm it with one robot request: the receivers answer 403 portal_member and count webhook_rejected_total{reason="portal_member"} when it differs',
  );
}

function form(v: unknown): string {
  if (v === null || v === undefined) return "empty";
  if (typeof v === "boolean") return "JSON true/false";
  if (typeof v === "number") return "number 1/0";
  if (v === "Y" || v === "N") return 'string "Y"/"N"';
  if (v === "1" || v === "0") return 'string "1"/"0"';
  return `an unexpected ${typeof v}`;
}

async function probes(client: CrmClient, config: Config, settings: Settings | null): Promise<CheckResult[]> {
  const reg = config.fields.registered;
  const regRest = toRestFieldName(reg);
  const sample = await rest(client, "crm.contact.list", {
    order: { ID: "DESC" },
    select: ["ID", "DATE_MODIFY", reg],
    start: 0,
  });
  if (!sample.ok) {
    return [
      notChecked(
        "portal.probe_date_modify",
        `crm.contact.list failed (${sample.code})`,
        "the technical user must read Contacts (§13)",
      ),
      notChecked("portal.probe_registered_form", `crm.contact.list failed (${sample.code})`),
      notChecked("portal.probe_opened_filter", `crm.contact.list failed (${sample.code})`),
    ];
  }
  const rows = (Array.isArray(sample.result) ? sample.result : []).map(rec);
  const out: CheckResult[] = [];
  const legacy = rows[0];
  const id = legacy ? Number(legacy.ID) : NaN;
  let item: Record<string, unknown> | undefined;
  if (legacy && Number.isInteger(id)) {
    const ir = await rest(client, "crm.item.list", {
      entityTypeId: 3,
      filter: { id },
      select: ["id", "updatedTime", regRest],
    });
    if (ir.ok)
      item = (Array.isArray(rec(ir.result).items) ? (rec(ir.result).items as unknown[]) : []).map(rec)[0];
  }
  if (!legacy) {
    const none = "the portal has no Contact to look at";
    out.push(check("portal.probe_date_modify", "warn", none, "run preflight again once a Contact exists"));
    out.push(
      check("portal.probe_registered_form", "warn", none, "run preflight again once a Contact exists"),
    );
  } else if (!item) {
    out.push(
      notChecked(
        "portal.probe_date_modify",
        "crm.item.list (entityTypeId 3) did not return the sample Contact",
      ),
    );
    out.push(
      notChecked(
        "portal.probe_registered_form",
        "crm.item.list (entityTypeId 3) did not return the sample Contact",
      ),
    );
  } else {
    // DATE_MODIFY (what contact.read stores) against updatedTime (what reconciliation filters on).
    const a = Date.parse(String(legacy.DATE_MODIFY ?? ""));
    const b = Date.parse(String(item.updatedTime ?? ""));
    const overlap = settings?.reconcile.overlapSec ?? null;
    if (Number.isNaN(a) || Number.isNaN(b)) {
      out.push(
        check(
          "portal.probe_date_modify",
          "fail",
          "DATE_MODIFY or updatedTime of a sample Contact is not an ISO 8601 time",
          "report it: both are documented as ISO 8601 with an offset",
        ),
      );
    } else if (a === b) {
      out.push(
        check(
          "portal.probe_date_modify",
          "ok",
          "DATE_MODIFY (crm.contact.list) and updatedTime (crm.item.list) name the same instant on a sample Contact",
        ),
      );
    } else {
      const d = Math.ceil(Math.abs(a - b) / 1000);
      const covered = overlap !== null && d <= overlap;
      out.push(
        check(
          "portal.probe_date_modify",
          covered ? "warn" : "fail",
          `DATE_MODIFY and updatedTime of a sample Contact differ by ${d} s${overlap !== null ? ` (reconcile.overlap_sec is ${overlap})` : ""}`,
          `keep reconcile.overlap_sec at least ${d} so the reconciliation window covers the difference`,
        ),
      );
    }
    // The registration flag as each API returns it; contact.read decodes the legacy form.
    const lv = legacy[reg];
    const iv = item[regRest];
    const readable = (v: unknown) =>
      v === null || v === undefined || v === "" || decodeRegistered(v) !== null;
    const found = `crm.contact.list returns ${form(lv)}, crm.item.list returns ${form(iv)}`;
    out.push(
      readable(lv) && readable(iv)
        ? check("portal.probe_registered_form", "ok", `registration flag: ${found}; both are read correctly`)
        : check(
            "portal.probe_registered_form",
            "fail",
            `registration flag: ${found}, which decodeRegistered (src/crm/contact-fields.ts) does not read`,
            "report it: the flag's decoding must learn this form before enabling",
          ),
    );
  }
  out.push(await probeOpened(client, settings, rows.length));
  return out;
}

/** How many Contacts (first page) `opened=<value>` returns, for the configured value and the others. */
async function probeOpened(
  client: CrmClient,
  settings: Settings | null,
  anyContacts: number,
): Promise<CheckResult> {
  if (settings === null)
    return notChecked("portal.probe_opened_filter", "the hot settings could not be read (database.settings)");
  const configured = settings.reconcile.openedFilter;
  const count = async (v: string): Promise<number | string> => {
    const r = await rest(client, "crm.item.list", {
      entityTypeId: 3,
      filter: { opened: v },
      select: ["id"],
      start: -1,
    });
    if (!r.ok) return r.code;
    const items = rec(r.result).items;
    return Array.isArray(items) ? items.length : 0;
  };
  const mine = await count(configured);
  if (typeof mine === "string") {
    return check(
      "portal.probe_opened_filter",
      "fail",
      `crm.item.list with opened=${configured} was refused (${mine})`,
      "set reconcile.opened_filter to Y (the documented form for system booleans)",
    );
  }
  if (mine > 0) {
    return check(
      "portal.probe_opened_filter",
      "ok",
      `reconcile.opened_filter=${configured}: opened=${configured} returns Contacts`,
    );
  }
  if (anyContacts === 0) {
    return check(
      "portal.probe_opened_filter",
      "warn",
      `reconcile.opened_filter=${configured}: the portal has no Contact to look at`,
      "run preflight again once a Contact exists",
    );
  }
  const others: string[] = [];
  for (const v of ["Y", "1"]) {
    if (v === configured) continue;
    const n = await count(v);
    if (typeof n === "number" && n > 0) others.push(v);
  }
  return check(
    "portal.probe_opened_filter",
    "fail",
    `reconcile.opened_filter=${configured}: opened=${configured} returns no Contact although Contacts exist${others.length > 0 ? `; opened=${others.join(" and opened=")} does return some` : ""}`,
    others.length > 0
      ? `set reconcile.opened_filter to ${others[0]} (docs/admin.md), or reconciliation finds nothing`
      : "no value finds an open Contact: either no Contact is open (OPENED=Y) or the technical user cannot see them; reconciliation would find nothing either",
  );
}
