// `npm run preflight -- --write` against the emulator over loopback, as the portal the reference
// documents and as each variant of the forms it leaves open (tools/emulator/store.ts, PortalContract):
// the probe fails naming the field or filter and the setting to change wherever the service's own
// form would not work, passes where it would, and leaves no Contact or item behind in every case.
// Plain preflight writes nothing. Also the Contact workflow check (portal.contact_workflow).
import { spawn } from "node:child_process";
import test, { type ExecutionContext } from "ava";
import {
  type CheckResult,
  formatReport,
  PROBE_IDS,
  type PreflightReport,
  runPreflight,
} from "../../../src/preflight/index.js";
import type { Emulator } from "../../../tools/emulator/server.js";
import { contactWorkflowTemplate } from "../../../tools/emulator/store.js";
import {
  ALERT_SETTINGS,
  type Deployment,
  deployment,
  PUBLIC_BASE_URL,
  SAMPLE_PHONE,
} from "../../helpers/preflight.js";
import { setSettings } from "../../helpers/settings.js";
import { createOwnedTestDb, createTestDb, type OwnedTestDb, type TestDb } from "../../helpers/testdb.js";

// One database owned as a deployment's is (database.owner passes, so exit codes mean something),
// shared by the tests that leave its settings alone; a test that changes settings gets its own
// (owned by the test server's superuser: database.owner fails there, so those tests look at the
// probe's lines, not the exit code).
let owned: OwnedTestDb;
const open: Deployment[] = [];
const dbs: TestDb[] = [];
test.before(async () => {
  owned = await createOwnedTestDb({ cutover: false });
  await setSettings(owned, ALERT_SETTINGS);
});
test.after.always(async () => {
  await Promise.all(open.map((d) => d.close()));
  await Promise.all(dbs.map((d) => d.drop()));
  await owned?.drop();
});

/** A deployment on the shared database, or (`settings` given) on a database of its own. */
async function deploy(
  opts: Parameters<typeof deployment>[0]["emulator"] = {},
  settings?: Record<string, unknown>,
) {
  let db: TestDb = owned;
  if (settings !== undefined) {
    db = await createTestDb();
    dbs.push(db);
    await setSettings(db, { ...ALERT_SETTINGS, ...settings });
  }
  const d = await deployment({
    databaseUrl: db.url,
    ...(db === owned ? { ownerUrl: owned.ownerUrl } : {}),
    emulator: opts,
  });
  open.push(d);
  return { d, db };
}

/** Methods that change the portal's data. */
const WRITES = new Set([
  "crm.contact.add",
  "crm.contact.update",
  "crm.contact.delete",
  "crm.item.add",
  "crm.item.update",
  "crm.item.delete",
]);

function byId(r: PreflightReport, id: string): CheckResult {
  const c = r.results.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
}

function assertNoSecrets(t: ExecutionContext, d: Deployment, text: string) {
  for (const s of d.secrets) t.false(text.includes(s), "a secret value in the output");
  t.false(text.includes(d.emulator.secret), "the webhook's secret in the output");
  t.false(text.includes("/rest/1/"), "the webhook URL's path in the output");
  t.false(text.includes(SAMPLE_PHONE.slice(2)), "a Contact's phone in the output");
}

/** What the portal holds that the probe could have left: every Contact but the sample, every item. */
function leftovers(e: Emulator): { contacts: number[]; items: number[] } {
  return {
    contacts: [...e.store.contacts.values()].filter((c) => c.name !== "Sample").map((c) => c.id),
    items: [...e.store.items.keys()],
  };
}

async function probe(t: ExecutionContext, d: Deployment, phone?: string): Promise<PreflightReport> {
  const r = await runPreflight(d.env, { write: phone ? { phone } : {} });
  const text = formatReport(r);
  assertNoSecrets(t, d, text + JSON.stringify(r));
  t.log(text);
  t.deepEqual(leftovers(d.emulator), { contacts: [], items: [] }, "the probe left something behind");
  return r;
}

async function recorded(db: TestDb): Promise<number> {
  const { rows } = await db.pool.query("select count(*)::int as n from bitrix_sync.crm_contract_probes");
  return rows[0]?.n as number;
}

test("plain preflight writes nothing: no write method reaches the portal, no record changes", async (t) => {
  const { d } = await deploy();
  const before = JSON.stringify([...d.emulator.store.contacts.values()]);
  const r = await runPreflight(d.env);
  t.is(r.exitCode, 0, formatReport(r));
  const called = d.emulator.log.flatMap((e) => e.commands);
  t.true(called.length > 5, "it did ask the portal");
  t.deepEqual(
    called.filter((m) => WRITES.has(m)),
    [],
  );
  t.is(JSON.stringify([...d.emulator.store.contacts.values()]), before);
  t.is(d.emulator.store.items.size, 0);
  t.false(r.results.some((c) => c.id.startsWith("probe.")));
});

test("against the documented portal every form the service sends works, $result references included; the pass is recorded and nothing is left", async (t) => {
  const { d, db } = await deploy();
  // The file's tests share one database: other probes may have recorded passes before this one.
  const before = await recorded(db);
  const r = await probe(t, d);
  const line = (id: string) => byId(r, id);
  for (const id of PROBE_IDS) t.is(line(id).status, "ok", `${id}: ${line(id).detail}`);
  t.regex(
    line("probe.list_changed").detail,
    /keyset form .* offset form .* the audit's \(withUserId, with its user id\)/,
  );
  t.regex(
    line("probe.date_filter").detail,
    /narrows: a value after the Contact's change excludes it, one before includes it/,
  );
  t.regex(line("probe.registered_filter").detail, /with the flag set and not after it was cleared/);
  t.regex(line("probe.phone_update").detail, /still one entry/);
  t.regex(
    line("probe.alert_item").detail,
    /added in DT1040_7:NEW, found by its alert number, moved to DT1040_7:SUCCESS/,
  );
  t.regex(line("probe.cleanup").detail, /deleted everything the probe made: 2 Contact\(s\) and 1 item\(s\)/);
  // Each command of a batch is billed to its own method: the line names them.
  t.regex(
    line("probe.operating_time").detail,
    /crm\.contact\.add \d+\.\d{3} s \(\d+ call\(s\), \d+ in a batch\)/,
  );
  t.regex(line("probe.operating_time").detail, /crm\.item\.list .* in a batch/);
  t.regex(line("probe.operating_time").detail, /the batch envelope itself: no operating time \(not billed\)/);
  // A create whose name holds a reference goes outside the batch (src/crm/batch.ts), so the portal,
  // which resolves references in batch values (reference §3), stores it verbatim.
  t.regex(line("probe.batch_references").detail, /stored as sent/);
  t.is(await recorded(db), before + 1);
  t.is(r.exitCode, 0, formatReport(r));
  // Every write the probe made is one the service makes, or its own clean-up.
  const writes = d.emulator.log.flatMap((e) => e.commands).filter((m) => WRITES.has(m));
  t.true(writes.includes("crm.contact.delete") && writes.includes("crm.item.delete"));
});

test("a portal that filters the flag only as Y/N: FAIL naming contract.registered_filter Y; with it set, the filter passes", async (t) => {
  const { d, db } = await deploy({ contract: { booleanFilter: "Y/N" } }, {});
  let r = await probe(t, d);
  for (const id of ["probe.list_changed", "probe.registered_filter"]) {
    t.is(byId(r, id).status, "fail", id);
    t.regex(byId(r, id).detail, /with the flag filtered as Y it does/);
    t.regex(byId(r, id).hint ?? "", /set contract\.registered_filter to Y/);
  }
  t.is(byId(r, "probe.registered_write").status, "ok");

  await setSettings(db, { "contract.registered_filter": "Y" });
  r = await probe(t, d);
  for (const id of [
    "probe.list_changed",
    "probe.registered_filter",
    "probe.date_filter",
    "probe.registered_write",
  ])
    t.is(byId(r, id).status, "ok", `${id}: ${byId(r, id).detail}`);
  t.regex(byId(r, "probe.registered_filter").detail, /filtered as Y/);
});

test("a portal that stores the flag only when written as Y/N: FAIL naming contract.registered_write Y; with it set, it passes", async (t) => {
  const { d, db } = await deploy({ contract: { booleanWrite: "Y/N" } }, {});
  let r = await probe(t, d);
  const w = byId(r, "probe.registered_write");
  t.is(w.status, "fail");
  t.regex(
    w.detail,
    /written as 1\/0 \(contract\.registered_write=1\) reads back cleared; written as Y\/N it reads back set/,
  );
  t.regex(w.hint ?? "", /set contract\.registered_write to Y/);
  // The rest was still probed, with the form that works.
  t.is(byId(r, "probe.registered_filter").status, "ok");

  await setSettings(db, { "contract.registered_write": "Y" });
  r = await probe(t, d);
  for (const id of ["probe.registered_write", "probe.clear", "probe.registered_filter", "probe.list_changed"])
    t.is(byId(r, id).status, "ok", `${id}: ${byId(r, id).detail}`);
});

test("a portal that takes only 1/0 for the flag passes with the service's default form", async (t) => {
  const { d } = await deploy({ contract: { booleanWrite: "1/0" } }, {});
  const r = await probe(t, d);
  for (const id of ["probe.registered_write", "probe.clear", "probe.registered_filter"])
    t.is(byId(r, id).status, "ok", `${id}: ${byId(r, id).detail}`);
});

test("a portal that ignores a date filter with an offset: FAIL naming contract.date_filter no_offset; with it set, the filter narrows", async (t) => {
  const { d, db } = await deploy({ contract: { dateFilterWithOffset: "ignored" } }, {});
  let r = await probe(t, d);
  const f = byId(r, "probe.date_filter");
  t.is(f.status, "fail");
  t.regex(
    f.detail,
    /with an offset \(\+00:00\) does not narrow: a value after the Contact's change still returns it/,
  );
  t.regex(f.hint ?? "", /without an offset, 12 h earlier it narrows: set contract\.date_filter to no_offset/);
  t.is(byId(r, "probe.list_changed").status, "ok", "with the filter ignored the list still finds it");

  await setSettings(db, { "contract.date_filter": "no_offset" });
  r = await probe(t, d);
  t.is(byId(r, "probe.date_filter").status, "ok", byId(r, "probe.date_filter").detail);
  t.regex(
    byId(r, "probe.date_filter").detail,
    /without an offset, 12 h earlier \(contract\.date_filter=no_offset\) narrows/,
  );
  t.is(byId(r, "probe.list_changed").status, "ok");
});

test("what the probe could not delete is named by ID; a configured phone is used", async (t) => {
  const { d } = await deploy();
  d.emulator.failNext(
    { kind: "command_error", error: "", description: "Access denied", status: 403 },
    { method: "crm.contact.delete", times: 2 },
  );
  const r = await runPreflight(d.env, { write: { phone: "+70001112233", name: "ops check" } });
  const c = byId(r, "probe.cleanup");
  t.is(c.status, "fail");
  const ids = [...c.detail.matchAll(/Contact (\d+) \(Access denied, HTTP 403\)/g)].map((m) => Number(m[1]));
  t.is(ids.length, 2);
  t.regex(c.hint ?? "", /delete them by hand in the portal \(their name holds "ops check [0-9a-f]{8}"\)/);
  const left = ids.map((i) => d.emulator.store.contacts.get(i));
  t.true(left.every((x) => x?.name.startsWith("ops check ")));
  t.true(
    left.some((x) => x?.phones.some((p) => p.value === "+70001112234")),
    "the second of the configured phones",
  );
  t.false(formatReport(r).includes("0001112"), "the probe's phones are not printed");
  for (const i of ids) d.emulator.store.contacts.delete(i);
});

test("the probe does not run when what it needs failed, and never in sandbox mode", async (t) => {
  const { d } = await deploy({ userFieldTypes: { registered: null } }, {});
  const r = await runPreflight(d.env, { write: {} });
  for (const id of PROBE_IDS) {
    t.is(byId(r, id).status, "unknown");
    t.regex(byId(r, id).detail, /the probe did not run: portal\.contact_fields did not pass/);
  }
  t.deepEqual(leftovers(d.emulator), { contacts: [], items: [] });
  t.deepEqual(
    d.emulator.log.flatMap((e) => e.commands).filter((m) => WRITES.has(m)),
    [],
  );
});

test("as a process: --write --json, option errors are usage (64), and SIGINT mid-run still deletes what it made", async (t) => {
  const { d } = await deploy();
  const cli = (args: string[]) =>
    spawn(process.execPath, ["--import", "tsx", "scripts/preflight.ts", ...args], {
      env: d.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
  const done = (p: ReturnType<typeof cli>) =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      let out = "";
      let err = "";
      p.stdout.on("data", (b) => {
        out += b;
      });
      p.stderr.on("data", (b) => {
        err += b;
      });
      p.on("close", (code) => resolve({ code, out, err }));
    });
  const bad = await done(cli(["--write", "--probe-phone", "+79161234567"]));
  t.is(bad.code, 64);
  t.regex(bad.err, /--probe-phone \/ BITRIX_SYNC_PROBE_PHONE: \+70 and 9 digits/);
  t.is((await done(cli(["--probe-name", "x"]))).code, 64, "probe options need --write");

  const full = await done(cli(["--write", "--json"]));
  const parsed = JSON.parse(full.out) as PreflightReport;
  t.is(full.code, parsed.exitCode);
  t.is(byId(parsed, "probe.contact_add").status, "ok");
  assertNoSecrets(t, d, full.out + full.err);
  t.deepEqual(leftovers(d.emulator), { contacts: [], items: [] });

  // Slow the portal down, interrupt once the probe's first Contact exists.
  d.emulator.setLatency(150);
  const p = cli(["--write"]);
  const result = done(p);
  const deadline = Date.now() + 60_000;
  while (leftovers(d.emulator).contacts.length === 0 && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  t.true(leftovers(d.emulator).contacts.length > 0, "the probe created its Contact");
  p.kill("SIGINT");
  const r = await result;
  d.emulator.setLatency(0);
  t.log(r.out);
  t.regex(r.err, /interrupted; deleting what the probe made/);
  t.regex(r.out, /^\?\? +probe\.\w+ +not checked: interrupted \(SIGINT\) before this step/m);
  t.regex(r.out, /^ok +probe\.cleanup +deleted everything the probe made/m);
  t.is(r.code, 2);
  t.deepEqual(leftovers(d.emulator), { contacts: [], items: [] });
});

test("the Contact workflow: started on create and change and posting to the receiver passes; each mistake is named", async (t) => {
  const { d } = await deploy();
  t.is(byId(await runPreflight(d.env), "portal.contact_workflow").status, "ok");
  const url = (tok: string, path = "/bitrix/sync/webhook/contact") =>
    `${PUBLIC_BASE_URL}${path}?token=${tok}&ID={{ID}}`;
  const goodToken = d.contactToken;
  const templates = d.emulator.store.workflowTemplates;
  const set = (...list: ReturnType<typeof contactWorkflowTemplate>[]) =>
    templates.splice(0, templates.length, ...list);
  const line = async () => byId(await runPreflight(d.env), "portal.contact_workflow");

  set(contactWorkflowTemplate(url(goodToken), 1));
  let c = await line();
  t.is(c.status, "fail");
  t.regex(c.detail, /it starts on create \(AUTO_EXECUTE 1\), not on create and on change/);
  set(contactWorkflowTemplate(url("0".repeat(48)), 3));
  c = await line();
  t.is(c.status, "fail");
  t.regex(c.detail, /its token is neither the current nor the previous Contact receiver token/);
  t.false(c.detail.includes(goodToken));
  set();
  c = await line();
  t.is(c.status, "fail");
  t.regex(c.detail, /no workflow template for Contacts/);
  set(contactWorkflowTemplate(url(goodToken, "/elsewhere"), 3));
  t.is((await line()).status, "unknown", "a template whose webhook goes elsewhere is not the receiver's");

  set(contactWorkflowTemplate(url(goodToken), 3));
  d.emulator.store.scopes.splice(d.emulator.store.scopes.indexOf("bizproc"), 1);
  c = await line();
  t.is(c.status, "unknown");
  t.regex(c.detail, /lacks the bizproc scope/);
  t.regex(c.hint ?? "", /give the incoming webhook the bizproc scope/);
});

test("the Contact workflow is not checked when the webhook's user is not an administrator", async (t) => {
  const { d } = await deploy({ bizprocAdmin: false });
  const r = await runPreflight(d.env);
  const c = byId(r, "portal.contact_workflow");
  t.is(c.status, "unknown");
  t.regex(c.detail, /administrators only \(ACCESS_DENIED\)/);
  t.is(r.exitCode, 2);
  t.is(byId(r, "portal.credential").status, "ok", "bizproc next to crm is no excess scope");
});

test("an open-flag value the portal does not match: FAIL naming reconcile.opened_filter; the other filters are still probed", async (t) => {
  const { d } = await deploy({}, { "reconcile.opened_filter": "1" });
  const r = await probe(t, d);
  const l = byId(r, "probe.list_changed");
  t.is(l.status, "fail");
  t.regex(
    l.detail,
    /opened=1, >=updatedTime with an offset \(\+00:00\)\) does not return the probe's Contact; with opened=Y it does/,
  );
  t.regex(l.hint ?? "", /set reconcile\.opened_filter to Y/);
  t.is(byId(r, "probe.date_filter").status, "ok", byId(r, "probe.date_filter").detail);
  t.is(byId(r, "probe.registered_filter").status, "ok", byId(r, "probe.registered_filter").detail);
});
