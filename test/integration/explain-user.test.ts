// One user's story for the admin: bitrix_sync.explain_user() in time order with no personal value
// beyond masked ones, and `npm run diagnose` (a child process with the admin role only) adding the
// live Contact side by side; the admin-facing errors of the convergence audit's functions
// (BS060, BS061, BS004) and that the runtime role cannot call them.
import { createHash, randomBytes } from "node:crypto";
import test from "ava";
import pg from "pg";
import { runConvergenceAudit } from "../../src/audit/run.js";
import { SANDBOX_FIELDS } from "../../src/config/env.js";
import {
  finishedWorkflow,
  type Rig,
  startRig,
  TEST_HASH_KEY,
  testServiceEnv,
  waitFor,
} from "../helpers/e2e.js";
import { makeUser } from "../helpers/factories.js";
import { asRole, asRoleRolledBack } from "../helpers/roles.js";
import { cleanEnv, runProcess } from "../helpers/run-process.js";

const F = SANDBOX_FIELDS;
const PHONE = "+79161234567";
const NAME = "Anastasia Pavlovna";
const EMAIL = "anastasia.pavlovna@example.org";
let rig: Rig;
let userId: string;
let contactId: number;

test.before(async () => {
  rig = await startRig({
    settings: {
      "audit.enabled": false,
      "audit.grace_sec": 0,
      "reconcile.contacts_interval_sec": 86_400,
      "alerts.reconcile_interval_sec": 86_400,
    },
  });
  // Both reconciliations ran just now: their crontab entries find nothing due during these tests, so
  // the manager's edits below stay in the CRM alone, as the tests expect (a CI run's reconciliation at
  // the minute boundary brought the e-mail into the App).
  await rig.db.pool.query(
    `insert into bitrix_sync.reconciliation_cursors (job_type, last_run_started_at, last_success_at, last_run_status)
     values ('contacts', now(), now(), 'succeeded'), ('alerts', now(), now(), 'succeeded')
     on conflict (job_type) do update set last_run_started_at = now(), last_run_status = 'succeeded'`,
  );
  await rig.runtime.settings.refresh();
  await rig.startWorker();
  const u = await makeUser(rig.db.pool, { phone: PHONE, fullName: NAME });
  userId = u.id;
  await finishedWorkflow(rig, u.id);
  const { rows } = await rig.db.pool.query(
    "select external_id from bitrix_sync.entity_external_mapping where entity_id = $1 and status = 'active'",
    [u.id],
  );
  contactId = Number(rows[0].external_id);
  const contact = rig.emulator.store.contacts.get(contactId);
  if (!contact) throw new Error("no Contact");
  // A manager adds an e-mail (which a webhook brings to the App) and later removes the App's phone.
  contact.emails.push(rig.emulator.store.newMulti("WORK", EMAIL));
  contact.phones = [];
  rig.emulator.store.touch(contact);
  const report = await runConvergenceAudit(rig.runtime.services, rig.runtime.settings.get(), { all: true });
  if (report.status !== "succeeded") throw new Error(`audit ${report.status}`);
});
test.after.always(async () => {
  await rig?.close();
});

/** Every personal value this user has, in the forms a leak could take. */
const RAW = [PHONE, PHONE.slice(1), "9161234567", NAME, "Anastasia", "Pavlovna", EMAIL, "anastasia.pavlovna"];

test.serial(
  "explain_user tells the user's story in time order, with personal values masked only",
  async (t) => {
    const rows = await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
      const { rows } = await c.query("select at, source, event, detail from bitrix_sync.explain_user($1)", [
        userId,
      ]);
      return rows as Array<{
        at: Date | null;
        source: string;
        event: string;
        detail: Record<string, unknown>;
      }>;
    });
    const sources = new Set(rows.map((r) => r.source));
    for (const s of ["app", "intent", "workflow", "command", "mapping", "snapshot", "drift"]) {
      t.true(sources.has(s), `the story has ${s} events`);
    }
    const times = rows.map((r) => r.at?.getTime() ?? Number.POSITIVE_INFINITY);
    t.deepEqual(
      times,
      [...times].sort((a, b) => a - b),
      "in time order",
    );
    t.true(
      rows.some((r) => r.source === "workflow" && r.event === "finished" && r.detail.outcome === "created"),
      "the map_or_create and how it ended",
    );
    t.true(rows.some((r) => r.source === "command" && r.event === "contact.add"));
    t.true(
      rows.some(
        (r) => r.source === "mapping" && r.event === "opened" && r.detail.contact_id === String(contactId),
      ),
    );
    t.true(rows.some((r) => r.source === "drift" && r.event === "phone_missing"));
    const app = rows.find((r) => r.source === "app" && r.event === "identity_created");
    t.is(app?.detail.phone, "+7***67", "the phone masked: two first and two last characters");
    const profile = rows.find((r) => r.source === "app" && r.event === "profile_now");
    t.is(profile?.detail.full_name, "An***na");
    const text = JSON.stringify(rows);
    for (const raw of RAW) t.false(text.includes(raw), `no ${raw} in the story`);
  },
);

test.serial(
  "explain_user and the repair refuse what makes no sense, with a SQLSTATE, a sentence and a hint",
  async (t) => {
    const unknown = "00000000-0000-4000-8000-000000000000";
    const e1 = await t.throwsAsync(
      asRoleRolledBack(rig.db.pool, "bitrix_sync_admin", (c) =>
        c.query("select * from bitrix_sync.explain_user($1)", [unknown]),
      ),
    );
    t.like(e1, { code: "BS060" });
    t.regex((e1 as { hint?: string }).hint ?? "", /user_identity\.id/);
    const e2 = await t.throwsAsync(
      asRoleRolledBack(rig.db.pool, "bitrix_sync_admin", (c) =>
        c.query("select * from bitrix_sync.repair_drift('ops:test', 'nothing there', array[$1]::uuid[])", [
          unknown,
        ]),
      ),
    );
    t.like(e2, { code: "BS061" });
    t.regex((e2 as { hint?: string }).hint ?? "", /status_drift/);
    const e3 = await t.throwsAsync(
      asRoleRolledBack(rig.db.pool, "bitrix_sync_admin", (c) =>
        c.query("select * from bitrix_sync.repair_drift('ops:test', '')"),
      ),
    );
    t.like(e3, { code: "BS004" });
    // The runtime role runs the audit, not the admin's functions.
    for (const call of [
      "select * from bitrix_sync.explain_user(gen_random_uuid())",
      "select * from bitrix_sync.repair_drift('ops:x', 'why not', null, true)",
      "select * from bitrix_sync.status_drift",
    ]) {
      const e = await t.throwsAsync(asRoleRolledBack(rig.db.pool, "bitrix_sync_user", (c) => c.query(call)));
      t.like(e, { code: "42501" }, call);
    }
  },
);

test.serial(
  "diagnose_app_values gives no digest: it compares in the database, the same whatever the caller adds, audited and limited per login",
  async (t) => {
    const admin = <T>(fn: (c: pg.PoolClient) => Promise<T>) =>
      asRoleRolledBack(rig.db.pool, "bitrix_sync_admin", fn);
    // The salted form (a plain SHA-256 of the caller's salt and the value) is gone.
    await t.throwsAsync(
      admin((c) =>
        c.query("select * from bitrix_sync.diagnose_app_values($1, $2::text)", [userId, "s".repeat(24)]),
      ),
      { code: "42883" },
    );
    const call = (extra: string) =>
      admin(async (c) => {
        const given = { phone: [PHONE, extra], full_name: [NAME, extra], email: [extra] };
        const { rows, fields } = await c.query("select * from bitrix_sync.diagnose_app_values($1, $2)", [
          userId,
          JSON.stringify(given),
        ]);
        return { rows, columns: fields.map((f) => f.name), given };
      });
    const salt1 = randomBytes(16).toString("hex");
    const salt2 = randomBytes(16).toString("hex");
    const one = await call(salt1);
    const two = await call(salt2);
    t.deepEqual(one.columns, ["field", "masked", "compared", "same"]);
    const either = (rows: typeof one.rows) =>
      rows.map((r) => (r.field === "email" ? { ...r, masked: "(either)" } : r));
    // The e-mail a manager added reaches the App only with a reconciliation run, which may come at
    // any time here: whichever the App holds, the caller's value is not it.
    const email = one.rows.find((r) => r.field === "email");
    t.true(email?.masked === null || email?.masked === "an***rg", String(email?.masked));
    t.deepEqual(either(one.rows), [
      { field: "phone", masked: "+7***67", compared: 2, same: true },
      { field: "full_name", masked: "An***na", compared: 2, same: true },
      { field: "email", masked: "(either)", compared: 1, same: false },
      { field: "citizenship", masked: null, compared: null, same: null },
    ]);
    t.deepEqual(
      either(two.rows),
      either(one.rows),
      "what a caller adds changes nothing it could key a dictionary by",
    );
    // No cell is a SHA-256 of anything the caller passed joined to any of the user's values.
    const sha = (x: string) => createHash("sha256").update(x, "utf8").digest("hex");
    const cells = one.rows.flatMap((r) => Object.values(r).map(String));
    for (const x of [salt1, JSON.stringify(one.given), userId])
      for (const v of [PHONE, NAME, EMAIL])
        for (const d of [sha(x + v), sha(v + x)])
          t.false(cells.includes(d) || cells.some((c) => c.includes(d.slice(0, 16))));
    // Wrong shapes are refused.
    for (const bad of [{ phone: PHONE }, { address: ["x"] }, { phone: Array(21).fill("x") }])
      await t.throwsAsync(
        admin((c) =>
          c.query("select * from bitrix_sync.diagnose_app_values($1, $2)", [userId, JSON.stringify(bad)]),
        ),
        { code: "BS004" },
      );
    // Each call is audited with the login, and a login gets 60 an hour.
    await asRoleRolledBack(rig.db.pool, "bitrix_sync_admin", async (c) => {
      await c.query("select * from bitrix_sync.diagnose_app_values($1, '{}')", [userId]);
      const { rows } = await c.query(
        "select db_user, operator_id, reason from bitrix_sync.admin_actions where action = 'diagnose_app_values' order by id desc limit 1",
      );
      t.is(rows[0]?.db_user, "postgres");
      t.regex(rows[0]?.reason, new RegExp(`user ${userId} compared with 0 value`));
      await c.query("reset role");
      await c.query(
        `insert into bitrix_sync.admin_actions (action, reason, operator_id)
         select 'diagnose_app_values', 'earlier comparisons', 'postgres' from generate_series(1, 60)`,
      );
      await c.query("set local role bitrix_sync_admin");
      await c.query("savepoint limit_reached");
      const e = await t.throwsAsync(
        c.query("select * from bitrix_sync.diagnose_app_values($1, '{}')", [userId]),
      );
      t.is((e as { code?: string }).code, "BS062");
      t.truthy((e as { hint?: string }).hint);
    });
    // The runtime may not call it.
    await t.throwsAsync(
      asRoleRolledBack(rig.db.pool, "bitrix_sync_user", (c) =>
        c.query("select * from bitrix_sync.diagnose_app_values($1, '{}')", [userId]),
      ),
      { code: "42501" },
    );
  },
);

function diagnoseEnv(): Record<string, string> {
  return cleanEnv({
    ...testServiceEnv(rig.emulator, { BITRIX_SYNC_HASH_KEY: TEST_HASH_KEY }),
    BITRIX_SYNC_ADMIN_DATABASE_URL: rig.db.url,
  });
}

test.serial("npm run diagnose shows App, snapshot and the live Contact side by side, masked", async (t) => {
  // The rig's worker calls the portal on schedules of its own (the reconciliation poll, the
  // limiter's probe): stopped while diagnose runs, so the request log holds diagnose's requests only.
  await rig.stopWorker();
  t.teardown(() => rig.startWorker());
  const before = rig.emulator.log.length;
  const r = await runProcess("npm", ["run", "-s", "diagnose", "--", userId], diagnoseEnv(), 60_000);
  t.is(r.code, 0, r.stderr);
  t.regex(r.stdout, /story \(time order/);
  t.regex(r.stdout, new RegExp(`link: Contact ${contactId} \\(active\\)`));
  t.regex(
    r.stdout,
    /^phone\s+\+7\*\*\*67\s+hash v3:\S{9}…\s+-\s+no$/m,
    "the App's phone is not on the Contact",
  );
  t.regex(r.stdout, /^email\s+-\s+-\s+an\*\*\*rg\s+no$/m, "the CRM has an e-mail the App does not");
  t.regex(r.stdout, /^full_name\s+An\*\*\*na\s+\S+.*An\*\*\*na\s+yes$/m);
  t.regex(r.stdout, /^user id\s+\(the link\)\s+-\s+this user\s+yes$/m);
  // The e-mail a manager added never reached the App (no webhook): the audit says so too.
  t.regex(r.stdout, /drift found by the audit: phone_missing, crm_master_behind/);
  for (const raw of RAW) t.false(r.stdout.includes(raw) || r.stderr.includes(raw), `no ${raw} printed`);
  t.false(r.stdout.includes(rig.emulator.secret), "no webhook secret");
  // One read request, read-only.
  const sent = rig.emulator.log.slice(before);
  t.is(sent.length, 1);
  t.deepEqual(sent[0]?.commands, ["crm.contact.list", "crm.contact.userfield.list"]);
  // And the admin's connection only: it ran as bitrix_sync_admin.
  t.is(rig.emulator.store.contacts.get(contactId)?.uf[F.userId], userId, "nothing written");
});

test.serial("npm run diagnose exits 65 for a user nobody knows and 64 without a user id", async (t) => {
  const unknown = await runProcess(
    "npm",
    ["run", "-s", "diagnose", "--", "00000000-0000-4000-8000-000000000000"],
    diagnoseEnv(),
    60_000,
  );
  t.is(unknown.code, 65);
  t.regex(unknown.stderr, /known neither to the App nor to bitrix-sync/);
  const usage = await runProcess("npm", ["run", "-s", "diagnose"], diagnoseEnv(), 60_000);
  t.is(usage.code, 64);
  t.regex(usage.stderr, /usage: npm run diagnose/);
});

test.serial(
  "npm run diagnose reads with the service's search path, from a URL with a host or a host= parameter",
  async (t) => {
    // The trap of docs/security.md ("Search path"): the database's own setting puts `public` first.
    // Only new sessions see it; it is taken back before the file's concurrent tests run.
    await rig.db.pool.query(`alter database ${rig.db.name} set search_path = public, pg_catalog`);
    t.teardown(() => rig.db.pool.query(`alter database ${rig.db.name} reset search_path`));
    const tcp = new URL(rig.db.url);
    // The server's socket directory when it has one (a Debian server; the embedded one listens on
    // TCP only), else its TCP host, in the host parameter, with user and password and no host in the
    // URL: the form WHATWG URL refuses, which the search path used to be lost on.
    const dirs =
      (await rig.db.pool.query<{ d: string }>("select current_setting('unix_socket_directories') as d"))
        .rows[0]?.d ?? "";
    const dir = dirs.split(",")[0]?.trim() ?? "";
    const host = dir.startsWith("/") ? dir : tcp.hostname;
    t.log(`host parameter: ${host}`);
    const socket = `postgres://${tcp.username}:${tcp.password}@/${rig.db.name}?host=${encodeURIComponent(host)}&port=${tcp.port}`;
    for (const [form, url] of Object.entries({ "URL with a host": rig.db.url, "host= parameter": socket })) {
      const r = await runProcess(
        "npm",
        ["run", "-s", "diagnose", "--", userId, "--no-crm"],
        { ...diagnoseEnv(), BITRIX_SYNC_ADMIN_DATABASE_URL: url },
        60_000,
      );
      t.is(r.code, 0, `${form}: ${r.stderr}`);
      const session = /^session: role (\S+), search_path (.+)$/m.exec(r.stdout);
      t.is(session?.[1], "bitrix_sync_admin", form);
      t.deepEqual(
        session?.[2]?.split(",").map((s) => s.trim()),
        ["pg_catalog", "pg_temp"],
        form,
      );
    }
    // The trap is real: a session that does not pin its path gets the database's.
    const plain = new pg.Client({ connectionString: socket });
    await plain.connect();
    t.teardown(() => plain.end());
    t.is(
      (await plain.query<{ p: string }>("select current_setting('search_path') as p")).rows[0]?.p,
      "public, pg_catalog",
    );
  },
);

test.serial(
  "a robot webhook's read is recorded in the snapshot (received and CRM time) and explain_user shows both",
  async (t) => {
    const contact = rig.emulator.store.contacts.get(contactId);
    if (!contact) return t.fail("no Contact");
    contact.name = "Anastasia Webhook";
    rig.emulator.store.touch(contact);
    // The robot's call, recorded as the receiver does; the running sync loop processes it.
    await rig.db.pool.query("select bitrix_sync.accept_webhook('contact', 3, $1, '203.0.113.9')", [
      String(contactId),
    ]);
    const snapshot = await waitFor(
      async () => {
        const { rows } = await rig.db.pool.query<{
          last_webhook_received_at: Date | null;
          last_webhook_source_at: Date | null;
          crm_updated_at: Date | null;
        }>(
          "select last_webhook_received_at, last_webhook_source_at, crm_updated_at from bitrix_sync.contact_snapshots where contact_id = $1",
          [String(contactId)],
        );
        return rows[0]?.last_webhook_source_at ? rows[0] : null;
      },
      15_000,
      "the webhook applied",
    );
    t.deepEqual(snapshot.last_webhook_source_at, snapshot.crm_updated_at, "the CRM time its read found");
    t.is(snapshot.last_webhook_source_at?.getTime(), contact.updatedTime);
    t.truthy(snapshot.last_webhook_received_at);
    const rows = await asRole(rig.db.pool, "bitrix_sync_admin", async (c) => {
      const { rows } = await c.query(
        "select detail from bitrix_sync.explain_user($1) where source = 'snapshot' and event = 'state'",
        [userId],
      );
      return rows as Array<{ detail: Record<string, unknown> }>;
    });
    const detail = rows.find((r) => r.detail.contact_id === String(contactId))?.detail;
    t.is(new Date(detail?.last_webhook_source_at as string).getTime(), contact.updatedTime);
    t.truthy(detail?.last_webhook_received_at);
  },
);
