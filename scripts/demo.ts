// `npm run demo`: the two directions of the sync, shown on the sandbox portal. It finds the running
// sandbox service (or starts one in the background and leaves it running), has a manager enter some
// Contacts, signs three App users up the App's way, shows which branch each took and why, edits a
// Contact in the portal, fires the Contact robot at the service and shows the App following, then
// prints the status view. One short line per event; no personal data but the demo's made-up names.
// Exit codes: 0 done; 78 refused (a real portal is configured, or sync is paused); 69 the service or
// the database could not be reached; 1 something did not happen within its time.
import { randomInt } from "node:crypto";
import { relative } from "node:path";
import pg from "pg";
import { type Config, loadConfig } from "../src/config/env.js";
import { embeddedUrl } from "../src/db/embedded.js";
import { databaseTarget } from "../src/db/target.js";
import { receiverConfig } from "../src/inbound/config.js";
import { dataDir } from "../src/local/data-dir.js";
import { classifyStartupError } from "../src/startup/errors.js";
import { createAppUser, type DemoUser } from "../tools/demo/app-users.js";
import {
  finishedWorkflow,
  mappedContact,
  openAlerts,
  profileOf,
  webhookProcessed,
} from "../tools/demo/observe.js";
import { SandboxPortal } from "../tools/demo/portal.js";
import { fireContactRobot } from "../tools/demo/robot.js";
import { ensureService, ready } from "../tools/demo/service.js";
import { statusLine } from "../tools/demo/status.js";
import { DemoError } from "../tools/demo/wait.js";

const START_TIMEOUT_MS = 90_000;
const STEP_TIMEOUT_MS = 30_000;

const say = (who: string, what: string) => console.log(`${who.padEnd(7)} ${what}`);

/** Distinct Russian mobile numbers, new on every run so earlier runs' Contacts do not interfere. */
function phones(n: number): string[] {
  const out = new Set<string>();
  while (out.size < n) out.add(`+79${String(randomInt(0, 1_000_000_000)).padStart(9, "0")}`);
  return [...out];
}

function refuseUnlessSandbox(config: Config): void {
  if (!config.sandbox) {
    throw new DemoError(
      "refused: BITRIX_SYNC_CRM_REST_WEBHOOK_URL is configured, so this would write to a real portal. The demo runs only in sandbox mode: unset it.",
      78,
    );
  }
  if (!config.processing) {
    throw new DemoError("refused: BITRIX_SYNC_ENABLED=false pauses the sync; unset it for the demo.", 78);
  }
}

async function databasePool(config: Config): Promise<pg.Pool> {
  const target = databaseTarget(config);
  let url: string;
  if (target.kind === "configured") url = target.url;
  else if (target.meta) url = embeddedUrl(target.meta);
  else throw new DemoError(`the embedded database in ${target.dir} was not initialised by the service`, 69);
  const pool = new pg.Pool({ connectionString: url, max: 3, application_name: "bitrix-sync-demo" });
  pool.on("error", () => undefined);
  try {
    await pool.query("select 1");
  } catch (e) {
    await pool.end().catch(() => undefined);
    throw new DemoError(
      `the service's database cannot be reached (${(e as { code?: string }).code ?? "error"})`,
      69,
    );
  }
  return pool;
}

const BRANCH_WHY: Record<string, string> = {
  B0: "no Contact had this phone, so a new Contact was created",
  "B1.1": "one free Contact had this phone; it was linked, not duplicated",
  "B2.1": "several Contacts had this phone; the newest was linked",
};

async function run(): Promise<void> {
  const t0 = Date.now();
  let config: Config;
  try {
    config = loadConfig();
  } catch (e) {
    const known = classifyStartupError(e);
    if (!known) throw e;
    throw new DemoError(known.lines.join("; "), known.exitCode);
  }
  refuseUnlessSandbox(config);
  console.log("bitrix-sync demo: the sandbox portal and the App, both on this machine");

  const local = dataDir(config.env);
  const svc = await ensureService(local, START_TIMEOUT_MS);
  const where = `pid ${svc.file.pid}, port ${svc.file.http.port}`;
  if (svc.started) {
    const rel = relative(process.cwd(), svc.logFile ?? "");
    const log = rel && !rel.startsWith("..") ? rel : svc.logFile;
    say("service", `started in the background (${where}); its log: ${log}`);
  } else {
    say("service", `already running (${where})`);
  }
  await ready(svc.file, STEP_TIMEOUT_MS);

  const pool = await databasePool(config);
  try {
    const portal = new SandboxPortal(svc.file.sandbox.crmWebhookUrl);
    const [annaPhone, borisPhone, veraPhone] = phones(3) as [string, string, string];

    // The CRM side first: Contacts a manager entered before these people signed up in the App.
    const borisContact = await portal.addContact("Boris Demo", borisPhone);
    say("crm", 'a manager enters Contact "Boris Demo" with Boris\'s phone');
    const veraOld = await portal.addContact("Vera Demo", veraPhone);
    const veraNew = await portal.addContact("Vera Demo", veraPhone);
    say("crm", 'a manager enters Contact "Vera Demo" twice with Vera\'s phone: an older and a newer record');

    const users: DemoUser[] = [];
    for (const [name, phone] of [
      ["Anna Demo", annaPhone],
      ["Boris Demo", borisPhone],
      ["Vera Demo", veraPhone],
    ] as const) {
      users.push(await createAppUser(pool, name, phone));
      say("app", `${name} signs up (identity + profile in one transaction, as han_app_user)`);
    }
    const [anna, boris, vera] = users as [DemoUser, DemoUser, DemoUser];

    const expected: Array<[DemoUser, string, number | null]> = [
      [anna, "B0", null],
      [boris, "B1.1", borisContact],
      [vera, "B2.1", veraNew],
    ];
    for (const [user, branch, contact] of expected) {
      const wf = await finishedWorkflow(pool, user.id, user.name, STEP_TIMEOUT_MS);
      const linked = await mappedContact(pool, user.id);
      if (wf.state !== "succeeded" || wf.branch !== branch || linked === null) {
        throw new DemoError(
          `${user.name}: expected branch ${branch} and a linked Contact, got ${wf.branch ?? "no branch"} (${wf.state}, ${wf.outcome ?? "no outcome"})`,
        );
      }
      if (contact !== null && linked !== contact) {
        throw new DemoError(`${user.name}: linked another Contact than the one the manager entered`);
      }
      let why = BRANCH_WHY[branch] ?? "";
      if (branch === "B2.1") {
        if (!wf.others.includes(veraOld))
          throw new DemoError(`${user.name}: the older duplicate was not considered`);
        const alerts = await openAlerts(pool, user.id, "duplicate_contacts");
        why += alerts > 0 ? " and a duplicate_contacts alert was opened for a manager" : "";
      }
      say("sync", `${user.name} → ${branch}: ${why}`);
    }
    for (const user of users) {
      const id = (await mappedContact(pool, user.id)) as number;
      const c = await portal.getContact(id);
      if (c[config.fields.userId] !== user.id || c[config.fields.registered] !== "1") {
        throw new DemoError(`${user.name}'s Contact does not carry the App user id and the registered flag`);
      }
    }
    say("crm", "each linked Contact now carries its App user id and is marked registered");

    // The other direction: a manager edits a Contact; its robot tells the service.
    const annaContact = (await mappedContact(pool, anna.id)) as number;
    await portal.updateContact(annaContact, {
      NAME: "Anna-Maria Demo",
      EMAIL: [{ VALUE: "anna-maria@demo.example", VALUE_TYPE: "WORK" }],
    });
    say("crm", 'a manager renames "Anna Demo" to "Anna-Maria Demo" and adds an e-mail');
    const token = svc.file.sandbox.contactReceiverToken ?? config.secrets.BITRIX_SYNC_CONTACT_RECEIVER_TOKEN;
    const rc = receiverConfig(config);
    if (!token || !rc.portalHost || !rc.memberId) {
      throw new DemoError("the service published no Contact receiver token; restart it with npm start");
    }
    const status = await fireContactRobot(
      svc.file,
      { token, portalHost: rc.portalHost, memberId: rc.memberId },
      annaContact,
    );
    if (status !== 200) throw new DemoError(`the Contact receiver answered HTTP ${status}, not 200`);
    say("crm", "the Contact robot calls POST /bitrix/sync/webhook/contact: 200, accepted");
    const outcome = await webhookProcessed(pool, annaContact, STEP_TIMEOUT_MS);
    const p = await profileOf(pool, anna.id);
    if (outcome !== "applied" || p?.fullName !== "Anna-Maria Demo" || p.email === null) {
      throw new DemoError(`the App profile did not follow the CRM (webhook outcome: ${outcome})`);
    }
    say(
      "app",
      `Anna's profile followed the CRM (webhook outcome: ${outcome}): full name "${p.fullName}", e-mail set`,
    );

    const serviceToken = svc.file.sandbox.serviceToken ?? config.secrets.BITRIX_SYNC_SERVICE_TOKEN;
    if (serviceToken) say("status", await statusLine(svc.file, serviceToken));

    const secs = ((Date.now() - t0) / 1000).toFixed(1);
    say("done", `in ${secs} s. Explore the result with npm run psql (queries in the README).`);
    if (svc.started) say("", `The service keeps running for that; npm run stop stops it.`);
  } finally {
    await pool.end().catch(() => undefined);
  }
}

try {
  await run();
  process.exitCode = 0;
} catch (e) {
  if (e instanceof DemoError) {
    console.error(`demo: ${e.message}`);
    process.exitCode = e.exitCode;
  } else {
    // The name and code only: a message could quote values.
    const code = (e as { code?: unknown }).code;
    const what = `${e instanceof Error ? e.name : typeof e}${typeof code === "string" ? ` ${code}` : ""}`;
    console.error(`demo: unexpected error (${what}); this is a bug`);
    process.exitCode = 1;
  }
}
