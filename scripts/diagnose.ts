// `npm run diagnose -- <user-id> [--no-crm]`: one user's story (bitrix_sync.explain_user) and, side
// by side, what the App, the snapshot and the live Contact hold, masked (§15). Runs with the admin
// role only: it connects with BITRIX_SYNC_ADMIN_DATABASE_URL (or the file BITRIX_SYNC_ADMIN_DATABASE_URL_FILE
// names; locally, the service's own database) and does `set role bitrix_sync_admin` before anything
// else, so it sees what the admin may see and nothing more. The Contact is read once by ID, read-only,
// through the convergence audit's spare budget of the shared limiter (acquire_spare_crm_request):
// it never takes a token sync traffic needs. Equality of values is decided in the database
// (diagnose_app_values, audited and limited per login): the Contact's values go in, a masked value
// and a yes or no per field come out; no App value, and no digest of one, leaves the database.
// Exit codes: 0 printed; 64 bad arguments; 69 database or portal unreachable; 78 not an admin or
// not configured; 65 the user is unknown (BS060).
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import pg from "pg";
import { loadConfig } from "../src/config/env.js";
import { type CrmDeps, executeBatch } from "../src/crm/batch.js";
import { createCrmClient } from "../src/crm/client.js";
import { type CitizenshipItem, type ContactRecord, pickEmail } from "../src/crm/contact-fields.js";
import { type CrmLimiter, createSpareLimiter } from "../src/crm/limiter.js";
import { embeddedUrl } from "../src/db/embedded.js";
import { withSearchPath } from "../src/db/search-path.js";
import { databaseTarget } from "../src/db/target.js";
import { dataDir } from "../src/local/data-dir.js";
import { readServiceFile } from "../src/local/service-file.js";

const EX = { usage: 64, dataErr: 65, unavailable: 69, config: 78 } as const;

function fail(line: string, code: number): never {
  console.error(`diagnose: ${line}`);
  process.exit(code);
}

const args = process.argv.slice(2);
const userId = args.find((a) => !a.startsWith("--"));
const noCrm = args.includes("--no-crm");
if (!userId || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(userId)) {
  fail("usage: npm run diagnose -- <user-id (uuid)> [--no-crm]", EX.usage);
}

let config: ReturnType<typeof loadConfig>;
try {
  config = loadConfig();
} catch (e) {
  fail(`the configuration is invalid: ${(e as Error).message.split("\n")[0]}`, EX.config);
}

/** The admin's connection: its own variable or file; locally, the service's database. */
function adminUrl(): string {
  const direct = process.env.BITRIX_SYNC_ADMIN_DATABASE_URL;
  if (direct) return direct;
  const file = process.env.BITRIX_SYNC_ADMIN_DATABASE_URL_FILE;
  if (file) {
    try {
      return readFileSync(file, "utf8").replace(/\r?\n$/, "");
    } catch {
      fail("BITRIX_SYNC_ADMIN_DATABASE_URL_FILE cannot be read", EX.config);
    }
  }
  const target = databaseTarget(config);
  if (target.kind === "configured") return target.url;
  if (!target.meta) fail("set BITRIX_SYNC_ADMIN_DATABASE_URL to an admin login of the database", EX.config);
  return embeddedUrl(target.meta);
}

// The service's search path (src/db/search-path.ts), whatever form the admin's connection string
// takes: the admin role reads through the same pinned path as the service.
let connectionString: string;
try {
  connectionString = withSearchPath(adminUrl());
} catch (e) {
  fail((e as Error).message, EX.config);
}
const client = new pg.Client({ connectionString, application_name: "bitrix-sync-diagnose" });
try {
  await client.connect();
} catch (e) {
  fail(`cannot connect to the database (${(e as { code?: string }).code ?? "no answer"})`, EX.unavailable);
}
try {
  await client.query("set role bitrix_sync_admin");
} catch {
  await client.end();
  fail(
    "this login may not act as bitrix_sync_admin: connect with an admin login (BITRIX_SYNC_ADMIN_DATABASE_URL)",
    EX.config,
  );
}

interface Event {
  at: Date | null;
  source: string;
  event: string;
  detail: Record<string, unknown>;
}

let story: Event[];
try {
  story = (
    await client.query<Event>("select at, source, event, detail from bitrix_sync.explain_user($1)", [userId])
  ).rows;
} catch (e) {
  await client.end();
  if ((e as { code?: string }).code === "BS060")
    fail(`user ${userId} is known neither to the App nor to bitrix-sync`, EX.dataErr);
  throw e;
}

// Who and with which path it reads: the admin role, the service's pinned search path.
const session = (
  await client.query<{ role: string; path: string }>(
    "select current_user as role, current_setting('search_path') as path",
  )
).rows[0];

const out: string[] = [];
const line = (s = "") => out.push(s);
line(`bitrix-sync diagnose: user ${userId}`);
line(`session: role ${session?.role}, search_path ${session?.path}`);
line();
line("story (time order; personal values masked):");
for (const e of story) {
  const at = e.at ? e.at.toISOString().replace("T", " ").slice(0, 19) : "-".padEnd(19);
  line(`  ${at}  ${e.source.padEnd(11)} ${e.event.padEnd(24)} ${JSON.stringify(e.detail)}`);
}

// The active link, from the story: opened and not closed since.
const opened = story.filter((e) => e.source === "mapping" && e.event === "opened");
const closed = new Set(
  story.filter((e) => e.source === "mapping" && e.event === "closed").map((e) => e.detail.id),
);
const active = opened.filter((e) => !closed.has(e.detail.id)).map((e) => String(e.detail.contact_id));
const findingContacts = story
  .filter((e) => e.source === "drift" && typeof e.detail.contact_id === "string")
  .map((e) => String(e.detail.contact_id));
const contactId = active[0] ?? findingContacts[0] ?? null;
const snapshot = [...story]
  .reverse()
  .find((e) => e.source === "snapshot" && e.detail.contact_id === contactId);

const mask = (v: string | null | undefined) => {
  const t = v?.trim();
  if (!t) return "-";
  return t.length < 8 ? "***" : `${t.slice(0, 2)}***${t.slice(-2)}`;
};

let contact: ContactRecord | null | undefined;
let citizenship: CitizenshipItem[] | null = null;
let crmProblem: string | null = null;
if (!noCrm && contactId) {
  try {
    [contact, citizenship] = await readContact(Number(contactId));
  } catch (e) {
    crmProblem = (e as Error).message;
  }
}
const crmEmail = contact ? pickEmail(contact.emails) : null;
const crmCitizenship =
  contact?.citizenshipEnumId && citizenship
    ? (citizenship.find((i) => i.id === contact?.citizenshipEnumId)?.value ?? null)
    : null;

// The database compares the App's values with the Contact's (diagnose_app_values): no value and no
// digest of one leaves it; each field comes back masked with a yes or no.
const given: Record<string, string[]> = contact
  ? {
      phone: contact.phones.map((p) => p.value),
      full_name: contact.name ? [contact.name] : [],
      email: crmEmail ? [crmEmail] : [],
      citizenship: crmCitizenship ? [crmCitizenship] : [],
    }
  : {};
const app = new Map(
  (
    await client
      .query<{ field: string; masked: string | null; same: boolean | null }>(
        "select field, masked, same from bitrix_sync.diagnose_app_values($1, $2)",
        [userId, JSON.stringify(given)],
      )
      .catch(() => ({ rows: [] }))
  ).rows.map((r) => [r.field, r]),
);
await client.end();

line();
line(`link: ${active.length > 0 ? `Contact ${active[0]} (active)` : "no active link"}`);
if (contactId === null) {
  line("no Contact to read");
} else if (noCrm) {
  line("the live Contact was not read (--no-crm)");
} else if (crmProblem) {
  line(`the live Contact could not be read: ${crmProblem}`);
}
const same = (field: string) => {
  if (contact === undefined || contact === null) return "?";
  const s = app.get(field)?.same;
  return s === true ? "yes" : s === false ? "no" : "?";
};
const crmCol = (v: string) => (contact === undefined ? "(not read)" : contact === null ? "(missing)" : v);
line();
line(`${"field".padEnd(13)}${"App".padEnd(16)}${"snapshot".padEnd(26)}${"CRM (live)".padEnd(28)}App = CRM`);
const row = (field: string, appV: string, snap: string, crm: string, eq: string) =>
  line(`${field.padEnd(13)}${appV.padEnd(16)}${snap.padEnd(26)}${crm.padEnd(28)}${eq}`);
const hashOf = (k: string) =>
  snapshot?.detail[k] ? `hash ${String(snapshot.detail[k]).slice(0, 12)}…` : "-";
row(
  "phone",
  app.get("phone")?.masked ?? "-",
  hashOf("phone_hash"),
  crmCol(contact ? `${contact.phones.map((p) => mask(p.value)).join(", ") || "-"}` : ""),
  same("phone") === "yes" ? "yes (on the Contact)" : same("phone"),
);
row(
  "full_name",
  app.get("full_name")?.masked ?? "-",
  hashOf("name_hash"),
  crmCol(mask(contact?.name)),
  same("full_name"),
);
row("email", app.get("email")?.masked ?? "-", hashOf("email_hash"), crmCol(mask(crmEmail)), same("email"));
row(
  "citizenship",
  app.get("citizenship")?.masked ?? "-",
  snapshot?.detail.citizenship_enum_id ? `enum ${snapshot.detail.citizenship_enum_id}` : "-",
  crmCol(contact?.citizenshipEnumId ? `enum ${contact.citizenshipEnumId} ${mask(crmCitizenship)}` : "-"),
  same("citizenship"),
);
row(
  "user id",
  "(the link)",
  "-",
  crmCol(
    contact
      ? contact.userId === null
        ? "empty"
        : contact.userId === userId
          ? "this user"
          : "another user"
      : "",
  ),
  contact ? (contact.userId === userId ? "yes" : "no") : "?",
);
row(
  "registered",
  "-",
  snapshot ? String(snapshot.detail.registered) : "-",
  crmCol(contact ? String(contact.registered) : ""),
  "-",
);
row(
  "changed at",
  "-",
  snapshot?.detail.crm_updated_at ? String(snapshot.detail.crm_updated_at).slice(0, 19) : "-",
  crmCol(contact?.updatedAt ?? "-"),
  "-",
);
const findings = story.filter((e) => e.source === "drift").map((e) => e.event);
line();
line(`drift found by the audit: ${findings.length > 0 ? findings.join(", ") : "none"}`);
console.log(out.join("\n"));

/** One batch: the Contact by ID and the citizenship list, through the spare budget. */
async function readContact(id: number): Promise<[ContactRecord | null, CitizenshipItem[] | null]> {
  const portal = config.sandbox ? sandboxPortal() : null;
  const webhookUrl = portal?.url ?? config.secrets.BITRIX_SYNC_CRM_REST_WEBHOOK_URL;
  const portalHost = portal?.host ?? config.env.BITRIX_SYNC_PORTAL_HOST;
  if (!webhookUrl || !portalHost) throw new Error("no portal configured (BITRIX_SYNC_CRM_REST_WEBHOOK_URL)");
  const http = createCrmClient({
    webhookUrl,
    portalHost,
    timeoutMs: config.env.BITRIX_SYNC_HTTP_TIMEOUT_SEC * 1000,
  });
  // The admin may take spare budget but not feed the sync path's limiter (its note functions are
  // the runtime's): a limit refusal here is reported as a failed read, nothing else.
  const main: CrmLimiter & { bucket: string } = {
    bucket: portalHost.toLowerCase(),
    acquire: () => Promise.reject(new Error("not used")),
    noteRateLimited: async () => undefined,
    noteMethodBlocked: async (_m, until) => until,
    noteOperating: async () => undefined,
    blockedMethods: async () => new Map(),
    state: () => Promise.reject(new Error("not used")),
  };
  const deps: CrmDeps = {
    client: http,
    limiter: createSpareLimiter({
      pool: { query: (text: string, values: unknown[]) => client.query(text, values) } as unknown as pg.Pool,
      main,
      holder: `diagnose:${hostname()}:${process.pid}`.slice(0, 200),
    }),
    catalogue: { fields: config.fields },
  };
  try {
    const [read, list] = await executeBatch(
      deps,
      [
        { type: "contact.read", params: { ids: [id] } },
        { type: "citizenship.list", params: {} },
      ],
      { signal: AbortSignal.timeout(60_000) },
    );
    if (!read?.ok) throw new Error(`the portal answered ${read?.failure.code ?? "nothing"}`);
    const c = (read.result as { contacts: ContactRecord[] }).contacts[0] ?? null;
    const items = list?.ok ? (list.result as { items: CitizenshipItem[] }).items : null;
    return [c, items];
  } finally {
    await http.close();
  }
}

/** The sandbox portal of a running `npm start` (its service file), when no portal is configured. */
function sandboxPortal(): { url: string; host: string } | null {
  const f = readServiceFile(dataDir(config.env));
  if (!f) return null;
  const u = new URL(f.sandbox.crmWebhookUrl);
  return { url: f.sandbox.crmWebhookUrl, host: u.host };
}
