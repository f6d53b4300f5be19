// `npm run demo` as a newcomer runs it, on an embedded PostgreSQL in a data folder of the test's own
// (BITRIX_SYNC_DATA_DIR) and a free port: it starts the sandbox service in the background, shows the
// three map_or_create branches and a CRM edit coming back through the robot webhook, and leaves the
// service running for `npm run psql`; `npm run stop` stops it. Then the rows are checked.
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import pg from "pg";
import { embeddedAnswers, embeddedUrl, freePort, readEmbeddedMeta } from "../../src/db/embedded.js";
import { processAlive, readServiceFile, type ServiceFile } from "../../src/local/service-file.js";
import { cleanEnv, runProcess } from "../helpers/run-process.js";

const parent = mkdtempSync(join(tmpdir(), "bitrix-sync-demo-"));
// As root the embedded PostgreSQL runs as the `postgres` system user: it must enter the folder.
chmodSync(parent, 0o755);
// Not created: on a fresh clone nothing has made `.data/` before `npm run demo` runs.
const data = join(parent, "data");
let env: Record<string, string>;
let service: ServiceFile | null = null;

test.before(async () => {
  env = cleanEnv({
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_DATA_DIR: data,
    HOST: "127.0.0.1",
    PORT: String(await freePort()),
    LOG_LEVEL: "info",
  });
});

test.after.always(async () => {
  // A failed run may leave the service (and its PostgreSQL) behind: stop them by their own pids.
  const left = readServiceFile(data);
  if (left && processAlive(left.pid)) {
    process.kill(left.pid, "SIGTERM");
    for (let i = 0; i < 100 && processAlive(left.pid); i++) await new Promise((r) => setTimeout(r, 100));
    if (processAlive(left.pid)) process.kill(left.pid, "SIGKILL");
  }
  const pidFile = join(data, "pg", "data", "postmaster.pid");
  if (existsSync(pidFile)) {
    const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
    if (pid > 0 && processAlive(pid)) process.kill(pid, "SIGINT");
  }
  rmSync(parent, { recursive: true, force: true });
});

const npm = (args: string[], extra: Record<string, string> = {}, timeoutMs = 120_000) =>
  runProcess("npm", ["run", "--silent", ...args], { ...env, ...extra }, timeoutMs);

/** Values that must never be printed: the sandbox webhook's secret, the tokens, the DB password. */
function secrets(f: ServiceFile): string[] {
  const webhookSecret = new URL(f.sandbox.crmWebhookUrl).pathname.split("/")[3] ?? "";
  const meta = readEmbeddedMeta(join(data, "pg"));
  return [
    webhookSecret,
    f.sandbox.contactReceiverToken ?? "",
    f.sandbox.serviceToken ?? "",
    meta?.password ?? "",
  ].filter((s) => s.length >= 8);
}

test.serial(
  "npm run demo starts the sandbox service, shows each branch and the CRM edit, and exits 0",
  async (t) => {
    const r = await npm(["demo"]);
    t.false(r.timedOut);
    t.is(r.code, 0, r.stdout + r.stderr);
    const out = r.stdout;
    t.regex(out, /^service +started in the background \(pid \d+, port \d+\)/m);
    t.regex(out, /^sync +Anna Demo → B0: no Contact had this phone, so a new Contact was created$/m);
    t.regex(
      out,
      /^sync +Boris Demo → B1\.1: one free Contact had this phone; it was linked, not duplicated$/m,
    );
    t.regex(
      out,
      /^sync +Vera Demo → B2\.1: several Contacts had this phone; the newest was linked and a duplicate_contacts alert was opened/m,
    );
    t.regex(out, /^crm +the Contact robot calls POST \/bitrix\/sync\/webhook\/contact: 200, accepted$/m);
    t.regex(
      out,
      /^app +Anna's profile followed the CRM \(webhook outcome: applied\): full name "Anna-Maria Demo"/m,
    );
    t.regex(
      out,
      /^status +ready · queue: none · active workflows: none · .*open alerts: duplicate_contacts 1$/m,
    );
    t.regex(out, /^done +in [\d.]+ s\./m);

    service = readServiceFile(data);
    t.truthy(service, "the service it started keeps running and says where it is");
    t.true(processAlive(service?.pid ?? -1));
    const log = readFileSync(join(data, "service.log"), "utf8");
    for (const s of secrets(service as ServiceFile)) {
      t.false(out.includes(s) || r.stderr.includes(s), "no secret in the demo's output");
      t.false(log.includes(s), "no secret in the service's log");
    }
    t.notRegex(out + log, /\+7\d{10}/, "no phone number printed or logged");
    t.notRegex(
      out + log,
      /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/,
      "no user id printed or logged",
    );
  },
);

test.serial(
  "the demo's rows: three intents from the App's trigger, the three branches, the profile from the CRM",
  async (t) => {
    const meta = readEmbeddedMeta(join(data, "pg"));
    t.truthy(meta);
    const pool = new pg.Pool({ connectionString: embeddedUrl(meta as NonNullable<typeof meta>), max: 2 });
    try {
      const { rows: flows } = await pool.query(
        `select p.full_name, w.workflow_type, w.state, w.outcome, w.step_data ->> 'branch' as branch,
              m.workflow_id = w.id as linked, q.payload_json ->> 'reason' as reason, q.status as queue_status
         from han_app.client_profile p
         join bitrix_sync.workflow_instances w on w.user_id = p.user_id
         join bitrix_sync.entity_external_mapping m on m.entity_id = p.user_id and m.status = 'active'
         join han_app.sync_queue q on q.entity_id = p.user_id
        order by w.step_data ->> 'branch'`,
      );
      // One intent per user: the profile's insert coalesced into the identity's, in the same transaction.
      t.deepEqual(flows, [
        {
          full_name: "Anna-Maria Demo",
          workflow_type: "contact.map_or_create",
          state: "succeeded",
          outcome: "created",
          branch: "B0",
          linked: true,
          reason: "profile_created",
          queue_status: "processed",
        },
        {
          full_name: "Boris Demo",
          workflow_type: "contact.map_or_create",
          state: "succeeded",
          outcome: "mapped",
          branch: "B1.1",
          linked: true,
          reason: "profile_created",
          queue_status: "processed",
        },
        {
          full_name: "Vera Demo",
          workflow_type: "contact.map_or_create",
          state: "succeeded",
          outcome: "mapped",
          branch: "B2.1",
          linked: true,
          reason: "profile_created",
          queue_status: "processed",
        },
      ]);
      const { rows: anna } = await pool.query(
        `select p.email, i.outcome, i.status
         from han_app.client_profile p
         join bitrix_sync.entity_external_mapping m on m.entity_id = p.user_id and m.status = 'active'
         join bitrix_sync.webhook_inbox i on i.entity_id = m.external_id and i.receiver = 'contact'
        where p.full_name = 'Anna-Maria Demo'`,
      );
      t.deepEqual(anna, [{ email: "anna-maria@demo.example", outcome: "applied", status: "processed" }]);
      const { rows: alerts } = await pool.query(
        `select a.alert_type, jsonb_array_length(a.candidate_contact_ids) as candidates
         from bitrix_sync.business_alerts a join han_app.client_profile p on p.user_id = a.user_id
        where p.full_name = 'Vera Demo'`,
      );
      t.deepEqual(alerts, [{ alert_type: "duplicate_contacts", candidates: 2 }]);
    } finally {
      await pool.end();
    }
  },
);

test.serial("npm run psql opens psql on the service's database without showing the password", async (t) => {
  const r = await npm([
    "psql",
    "--",
    "-Atc",
    "select count(*) from bitrix_sync.entity_external_mapping where status = 'active'",
  ]);
  t.is(r.code, 0, r.stderr);
  t.is(r.stdout.trim(), "3");
  for (const s of secrets(service as ServiceFile)) t.false(r.stdout.includes(s) || r.stderr.includes(s));
});

test.serial("a second demo reuses the running service; npm run stop stops it and its database", async (t) => {
  const again = await npm(["demo"]);
  t.is(again.code, 0, again.stdout + again.stderr);
  t.regex(again.stdout, new RegExp(`^service +already running \\(pid ${service?.pid}, port \\d+\\)$`, "m"));
  const meta = readEmbeddedMeta(join(data, "pg"));
  const stop = await npm(["stop"], {}, 60_000);
  t.is(stop.code, 0, stop.stderr);
  t.regex(stop.stdout, new RegExp(`the sandbox service \\(pid ${service?.pid}\\) has stopped`));
  t.false(processAlive(service?.pid ?? -1));
  t.is(readServiceFile(data), null, "the service file is gone with the service");
  t.false(await embeddedAnswers(meta as NonNullable<typeof meta>), "its embedded PostgreSQL stopped too");
  const psql = await npm(["psql", "--", "-c", "select 1"]);
  t.is(psql.code, 69);
  t.regex(psql.stderr, /the embedded database in .* is not running; .*npm start/);
});

test.serial(
  "after a restart the demo runs again: the new sandbox portal's IDs start above the database's",
  async (t) => {
    // The sandbox portal forgets its Contacts on restart; the database still names them.
    const r = await npm(["demo"]);
    t.is(r.code, 0, r.stdout + r.stderr);
    t.regex(r.stdout, /^service +started in the background/m);
    const meta = readEmbeddedMeta(join(data, "pg"));
    const pool = new pg.Pool({ connectionString: embeddedUrl(meta as NonNullable<typeof meta>), max: 1 });
    try {
      const { rows } = await pool.query(
        `select count(*)::int as active, count(distinct external_id)::int as contacts,
              (select count(*)::int from bitrix_sync.workflow_instances where state <> 'succeeded') as unfinished
         from bitrix_sync.entity_external_mapping where status = 'active'`,
      );
      // Three demo runs, three users each: nine Contacts, none taken twice, every workflow finished.
      t.deepEqual(rows, [{ active: 9, contacts: 9, unfinished: 0 }]);
    } finally {
      await pool.end();
    }
    t.is((await npm(["stop"], {}, 60_000)).code, 0);
  },
);

test("npm run demo refuses when a real portal is configured, without printing its URL", async (t) => {
  const secret = "realportalsecret4k9";
  const r = await npm(["demo"], {
    BITRIX_SYNC_CRM_REST_WEBHOOK_URL: `https://han.bitrix24.test/rest/1/${secret}/`,
    BITRIX_SYNC_PORTAL_HOST: "han.bitrix24.test",
    BITRIX_SYNC_DATA_DIR: join(data, "refused"),
  });
  t.is(r.code, 78);
  t.regex(r.stderr, /^demo: refused: BITRIX_SYNC_CRM_REST_WEBHOOK_URL is configured/m);
  t.false((r.stdout + r.stderr).includes(secret));
  t.false(existsSync(join(data, "refused")), "nothing was started");
});
