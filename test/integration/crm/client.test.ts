// The CRM client against the emulator over loopback HTTP: every command type, a mixed batch split
// into per-command outcomes, whole-batch failures judged per command, redirects, and the rule that
// the webhook secret and PII never reach logs, errors or outcomes.
import { createServer } from "node:http";
import { Writable } from "node:stream";
import test from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { type CrmDeps, executeBatch } from "../../../src/crm/batch.js";
import type { CrmCommand } from "../../../src/crm/catalogue.js";
import { createCrmClient } from "../../../src/crm/client.js";
import { phoneChange, planPhoneUpdate } from "../../../src/crm/contact-fields.js";
import { createCrm } from "../../../src/crm/index.js";
import { createLogger } from "../../../src/observability/logger.js";
import { startEmulator } from "../../../tools/emulator/server.js";
import { createMemoryLimiter } from "../../helpers/memory-limiter.js";
import { testSettings } from "../../helpers/settings.js";

const F = SANDBOX_FIELDS;
const UID = "0b7e7dbd-4fcb-4b38-8d56-1f7c0d1f6b0e";
const UID2 = "5f0c3a49-2a64-4f1f-9d3c-7f6a3f0e9b11";
const SECRET = "s3cr3tWebhookCode42";
const open: Array<{ close(): Promise<void> }> = [];
test.after.always(async () => {
  await Promise.all(open.map((o) => o.close()));
});

function capture() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  return { lines, log: createLogger({ level: "trace", destination: stream }) };
}

async function setup(opts: { timeoutMs?: number; secret?: string } = {}) {
  const emu = await startEmulator({ fields: F, secret: opts.secret ?? SECRET });
  const client = createCrmClient({
    webhookUrl: emu.url,
    portalHost: emu.host,
    timeoutMs: opts.timeoutMs ?? 2000,
  });
  const limiter = createMemoryLimiter({ settings: { refillPerSec: 100, burst: 100, maxInFlight: 4 } });
  const { lines, log } = capture();
  const deps: CrmDeps = { client, limiter, catalogue: { fields: F }, log };
  open.push(emu, client);
  return { emu, client, limiter, deps, lines };
}

test("every command type round-trips through one batch against the emulator", async (t) => {
  const { emu, deps } = await setup();
  const existing = emu.store.createContact({
    name: "Иван",
    phones: [{ value: "+79991234567", valueType: "MOBILE" }],
    emails: [
      { value: "home@example.com", valueType: "HOME" },
      { value: "work@example.com", valueType: "WORK" },
    ],
    uf: { [F.userId]: UID, [F.registered]: 1, [F.citizenship]: "46" },
  });
  const alert = emu.store.createItem(emu.store.smartProcesses[0]!, { title: "old" });
  const cmds: CrmCommand[] = [
    { type: "contact.find_by_phone", params: { phones: ["+79991234567", "+79990000000"] } },
    { type: "contact.read", params: { ids: [existing.id] } },
    {
      type: "contact.add",
      params: {
        phone: "+79995550000",
        userId: UID2,
        registered: true,
        name: "Пётр",
        citizenshipEnumId: "45",
      },
    },
    { type: "contact.update", params: { id: existing.id, registered: false } },
    { type: "contact.list_changed", params: { updatedSince: "2000-01-01T00:00:00+03:00" } },
    { type: "citizenship.list", params: {} },
    { type: "alert.add", params: { entityTypeId: 1040, fields: { title: "Дубли", ufCrm14_1: "fp" } } },
    { type: "alert.get", params: { entityTypeId: 1040, id: alert.id } },
    {
      type: "alert.update",
      params: { entityTypeId: 1040, id: alert.id, fields: { stageId: "DT1040_7:SUCCESS" } },
    },
    { type: "alert.list", params: { entityTypeId: 1040, ids: [alert.id] } },
  ];
  const out = await executeBatch(deps, cmds);
  t.is(emu.log.length, 1, "one HTTP request");
  t.like(emu.log[0], { method: "batch", batchSize: 10 });
  const ok = out.map((o) => (o.ok ? o.result : o.failure));
  t.deepEqual(ok[0], { contactIds: [existing.id] });
  t.like(ok[1], {
    contacts: [
      {
        id: existing.id,
        name: "Иван",
        userId: UID,
        registered: true,
        citizenshipEnumId: "46",
        phones: [{ value: "+79991234567", valueType: "MOBILE" }],
      },
    ],
  });
  const newId =
    out[2]?.ok && out[2].type === "contact.add" ? (out[2].result as { contactId: number }).contactId : 0;
  t.true(newId > existing.id);
  const created = emu.store.contacts.get(newId);
  t.like(created, { name: "Пётр", uf: { [F.userId]: UID2, [F.registered]: 1, [F.citizenship]: "45" } });
  t.deepEqual(
    created?.phones.map((p) => p.value),
    ["+79995550000"],
  );
  t.deepEqual(ok[3], { updated: true });
  t.is(emu.store.contacts.get(existing.id)?.uf[F.registered], 0, "flag written as 0");
  // Commands run in order inside the batch: the update above made the old Contact unregistered,
  // so only the new one is listed as changed+registered.
  t.deepEqual(ok[4], { ids: [newId], lastId: newId, complete: true, total: null });
  t.like(ok[5], { items: [{ id: "45", value: "Россия" }] });
  t.like(ok[6], { item: { stageId: "DT1040_7:NEW", fields: { title: "Дубли", ufCrm14_1: "fp" } } });
  t.like(ok[7], { item: { id: alert.id, stageId: "DT1040_7:NEW" } });
  t.like(ok[8], { item: { id: alert.id, stageId: "DT1040_7:SUCCESS" } });
  t.like(ok[9], { items: [{ id: alert.id, stageId: "DT1040_7:SUCCESS" }] });
});

test("update sends phones with their IDs: the number is replaced in its own entry type, never duplicated", async (t) => {
  const { emu, deps } = await setup();
  const c = emu.store.createContact({
    phones: [
      { value: "+79990000009", valueType: "WORK" },
      { value: "+79990000001", valueType: "HOME" },
    ],
  });
  const [read] = await executeBatch(deps, [{ type: "contact.read", params: { ids: [c.id] } }]);
  if (!read?.ok || read.type !== "contact.read") return t.fail("read failed");
  const plan = planPhoneUpdate(
    (read.result as unknown as { contacts: Array<{ phones: never }> }).contacts[0]!.phones,
    "+79990000002",
    "+79990000001",
  );
  if (!plan) return t.fail("no plan");
  const [upd] = await executeBatch(deps, [
    { type: "contact.update", params: { id: c.id, phones: [phoneChange(plan, "+79990000002")] } },
  ]);
  t.true(upd?.ok);
  t.deepEqual(
    emu.store.contacts.get(c.id)?.phones.map((p) => [p.value, p.valueType]),
    [
      ["+79990000009", "WORK"],
      ["+79990000002", "HOME"],
    ],
  );
  // Sending the same update again changes nothing: the plan is empty once the number is there.
  const [again] = await executeBatch(deps, [{ type: "contact.read", params: { ids: [c.id] } }]);
  const fresh = again?.ok
    ? (again.result as unknown as { contacts: Array<{ phones: never }> }).contacts[0]!.phones
    : [];
  t.is(planPhoneUpdate(fresh, "+79990000002", "+79990000001"), null);
});

test("a batch of mixed successes and failures is split into per-command outcomes", async (t) => {
  const { emu, deps } = await setup();
  const c = emu.store.createContact({ name: "ok" });
  emu.failNext(
    { kind: "command_error", error: "", description: "Access denied" },
    { method: "crm.item.add" },
  );
  const out = await executeBatch(deps, [
    { type: "contact.read", params: { ids: [c.id] } },
    { type: "contact.update", params: { id: 9999, registered: true } },
    { type: "contact.add", params: { phone: "8 (999) 123-45-67", userId: UID, registered: true } },
    { type: "alert.get", params: { entityTypeId: 1040, id: 777 } },
    { type: "alert.add", params: { entityTypeId: 1040, fields: { title: "x" } } },
    { type: "alert.add", params: { entityTypeId: 1040, fields: { title: "y" } } },
    { type: "contact.find_by_phone", params: { phones: ["+79991112233"] } },
  ]);
  const view = out.map((o) =>
    o.ok ? "ok" : `${o.failure.kind}:${o.failure.code}:${o.sent ? "sent" : "held"}`,
  );
  t.deepEqual(view, [
    "ok",
    "business:not_found:sent",
    "business:invalid_phone:held",
    "business:not_found:sent",
    "permanent:permission_denied:sent",
    "ok",
    "ok",
  ]);
  t.is(emu.log.length, 1);
  t.is(emu.log[0]?.batchSize, 6, "the command with an invalid phone never left");
  t.is(emu.store.items.size, 1, "only the second alert.add was applied");
});

test("OPERATION_TIME_LIMIT inside a batch blocks only that method; later batches hold it back", async (t) => {
  const { emu, deps, limiter } = await setup();
  emu.store.createContact({});
  // Exhaust crm.contact.list's operating budget in the portal.
  emu.operating.charge("crm.contact.list", 10_000);
  const first = await executeBatch(deps, [
    { type: "contact.read", params: { ids: [1] } },
    { type: "contact.find_by_phone", params: { phones: ["+79991112233"] } },
  ]);
  t.like(first[0], {
    ok: false,
    sent: true,
    failure: { kind: "transient", code: "operation_time_limit", spendsAttempt: false },
  });
  t.true(first[1]?.ok);
  const blocked = await limiter.blockedMethods();
  t.deepEqual([...blocked.keys()], ["crm.contact.list"]);
  const second = await executeBatch(deps, [
    { type: "contact.read", params: { ids: [1] } },
    { type: "contact.find_by_phone", params: { phones: ["+79991112233"] } },
  ]);
  t.like(second[0], { ok: false, sent: false, failure: { code: "operation_time_limit" } });
  const f = second[0] && !second[0].ok ? second[0].failure : null;
  t.true((f?.blockMethodUntil ?? 0) > Date.now() + 60_000 - 5_000);
  t.true(second[1]?.ok);
  t.deepEqual(emu.log[1]?.commands, ["crm.duplicate.findbycomm"], "the blocked method was not sent");
});

test("operating_reset_at from earlier replies sets how long a method stays blocked", async (t) => {
  const { emu, deps, limiter } = await setup();
  emu.store.createContact({});
  await executeBatch(deps, [{ type: "contact.read", params: { ids: [1] } }]);
  const reset = emu.operating.state("crm.contact.list").operatingResetAt * 1000;
  emu.operating.charge("crm.contact.list", 10_000);
  const [o] = await executeBatch(deps, [{ type: "contact.read", params: { ids: [1] } }]);
  t.like(o, { ok: false, failure: { code: "operation_time_limit", blockMethodUntil: reset } });
  t.is((await limiter.blockedMethods()).get("crm.contact.list"), reset);
});

test("whole-batch 503 QUERY_LIMIT_EXCEEDED: every command transient, no attempt spent, the rate is cut", async (t) => {
  const { emu, deps, limiter } = await setup();
  emu.failNext("QUERY_LIMIT_EXCEEDED", { method: "batch" });
  const out = await executeBatch(deps, [
    { type: "contact.add", params: { phone: "+79991234567", userId: UID, registered: true } },
    { type: "contact.read", params: { ids: [1] } },
  ]);
  for (const o of out)
    t.like(o, {
      ok: false,
      failure: { kind: "transient", code: "query_limit_exceeded", spendsAttempt: false },
    });
  const s = await limiter.state();
  t.true(s.rateFactor < 1);
  t.not(s.throttledUntil, null);
  t.is(emu.store.contacts.size, 0);
});

test("timeout after the write was committed: the write is uncertain, the read transient; nothing is re-sent", async (t) => {
  const { emu, deps } = await setup({ timeoutMs: 1500 });
  emu.failNext({ kind: "timeout_after_commit", holdMs: 10_000 });
  const out = await executeBatch(deps, [
    { type: "contact.add", params: { phone: "+79991234567", userId: UID, registered: true } },
    { type: "contact.find_by_phone", params: { phones: ["+79991234567"] } },
  ]);
  t.like(out[0], { ok: false, sent: true, failure: { kind: "uncertain", code: "timeout_no_reply" } });
  t.like(out[1], { ok: false, sent: true, failure: { kind: "transient", code: "timeout_no_reply" } });
  t.is(emu.store.contacts.size, 1, "the Contact exists: a blind retry would duplicate it");
  t.is(emu.log.length, 1, "the batch was sent exactly once");
  t.is(emu.log[0]?.status, 0, "and it was never answered");
});

test("malformed JSON: uncertain for a sent write, transient for a read, never a crash", async (t) => {
  const { emu, deps } = await setup();
  emu.failNext("malformed");
  const out = await executeBatch(deps, [
    { type: "contact.update", params: { id: 1, registered: true } },
    { type: "contact.read", params: { ids: [1] } },
  ]);
  t.like(out[0], { ok: false, failure: { kind: "uncertain", code: "malformed_reply" } });
  t.like(out[1], { ok: false, failure: { kind: "transient", code: "malformed_reply" } });
});

test("5xx before execution: writes are uncertain (a gateway error may hide a commit), reads transient", async (t) => {
  const { emu, deps } = await setup();
  emu.failNext("INTERNAL_SERVER_ERROR");
  const out = await executeBatch(deps, [
    { type: "alert.add", params: { entityTypeId: 1040, fields: { title: "x" } } },
    { type: "alert.list", params: { entityTypeId: 1040, ids: [1] } },
  ]);
  t.like(out[0], { ok: false, failure: { kind: "uncertain", code: "server_error", httpStatus: 500 } });
  t.like(out[1], { ok: false, failure: { kind: "transient", code: "server_error" } });
});

test("a revoked credential is permanent for every command", async (t) => {
  const { emu, deps } = await setup();
  emu.revokeCredential();
  const out = await executeBatch(deps, [
    { type: "citizenship.list", params: {} },
    { type: "contact.update", params: { id: 1, registered: true } },
  ]);
  for (const o of out)
    t.like(o, { ok: false, failure: { kind: "permanent", code: "credential_rejected", httpStatus: 401 } });
});

test("connection refused before sending: transient even for a write", async (t) => {
  const client = createCrmClient({
    webhookUrl: `http://127.0.0.1:1/rest/1/${SECRET}/`,
    portalHost: "127.0.0.1:1",
    timeoutMs: 1000,
  });
  open.push(client);
  const deps: CrmDeps = {
    client,
    limiter: createMemoryLimiter({ settings: { refillPerSec: 10, burst: 10, maxInFlight: 2 } }),
    catalogue: { fields: F },
  };
  const [o] = await executeBatch(deps, [
    { type: "contact.add", params: { phone: "+79991234567", userId: UID, registered: true } },
  ]);
  t.like(o, { ok: false, sent: false, failure: { kind: "transient", code: "connect_failed" } });
});

test("a 302 from a renamed portal is a permanent config error and is not followed", async (t) => {
  let followed = 0;
  const target = createServer((_req, res) => {
    followed++;
    res.end("{}");
  });
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", r));
  const tport = (target.address() as { port: number }).port;
  const old = createServer((_req, res) => {
    res.writeHead(302, { location: `http://127.0.0.1:${tport}/rest/1/${SECRET}/batch` });
    res.end();
  });
  await new Promise<void>((r) => old.listen(0, "127.0.0.1", r));
  const oport = (old.address() as { port: number }).port;
  open.push(
    { close: () => new Promise<void>((r) => target.close(() => r())) },
    { close: () => new Promise<void>((r) => old.close(() => r())) },
  );
  const client = createCrmClient({
    webhookUrl: `http://127.0.0.1:${oport}/rest/1/${SECRET}/`,
    portalHost: `127.0.0.1:${oport}`,
    timeoutMs: 1000,
  });
  open.push(client);
  const deps: CrmDeps = {
    client,
    limiter: createMemoryLimiter({ settings: { refillPerSec: 10, burst: 10, maxInFlight: 2 } }),
    catalogue: { fields: F },
  };
  const [o] = await executeBatch(deps, [{ type: "contact.read", params: { ids: [1] } }]);
  t.like(o, { ok: false, failure: { kind: "permanent", code: "portal_redirect", httpStatus: 302 } });
  t.is(followed, 0);
});

test("the webhook secret and PII never reach logs, errors or outcomes", async (t) => {
  const { emu, deps, lines } = await setup({ timeoutMs: 300 });
  const phone = "+79997776655";
  const email = "secret.person@example.com";
  emu.store.createContact({
    name: "Секретный Человек",
    phones: [{ value: phone }],
    emails: [{ value: email }],
  });
  // Failures only: a successful read legitimately returns the Contact's phone to its caller.
  const collected: unknown[] = [];
  const run = async (cmds: CrmCommand[]) => {
    for (const o of await executeBatch(deps, cmds)) if (!o.ok) collected.push(o);
  };
  await run([
    { type: "contact.read", params: { ids: [1] } },
    { type: "contact.find_by_phone", params: { phones: [phone] } },
  ]);
  emu.failNext("malformed");
  await run([{ type: "contact.add", params: { phone, userId: UID, registered: true, email } }]);
  emu.failNext({ kind: "timeout_after_commit", holdMs: 1000 });
  await run([{ type: "contact.add", params: { phone, userId: UID, registered: true, email } }]);
  emu.failNext("reset_before_execute");
  await run([{ type: "contact.find_by_phone", params: { phones: [phone] } }]);
  await run([{ type: "contact.add", params: { phone: "8999777665", userId: UID, registered: true, email } }]);
  emu.failNext({ kind: "command_error", error: "", description: `Contact ${phone} ${email} is not found` });
  await run([{ type: "contact.update", params: { id: 1, registered: true } }]);

  // The facade's citizenship loader throws a CrmError when the credential is revoked.
  const crm = createCrm({
    webhookUrl: emu.url,
    portalHost: emu.host,
    timeoutMs: 300,
    fields: F,
    limiter: deps.limiter,
    settings: () => testSettings(),
    ...(deps.log ? { log: deps.log } : {}),
  });
  open.push(crm);
  emu.revokeCredential();
  const err = await t.throwsAsync(() => crm.citizenship.resolve("45"));
  t.is(err?.name, "CrmError");
  t.regex(err?.message ?? "", /^CRM call failed: kind=permanent code=credential_rejected http=401/);

  const everything = [
    lines.join("\n"),
    JSON.stringify(collected),
    err?.message,
    err?.stack,
    JSON.stringify(err),
  ].join("\n");
  t.true(lines.length >= 6, "the batches were logged");
  for (const leak of [SECRET, emu.url, "7776655", email, "Секретный"]) {
    t.false(everything.includes(leak), `found ${leak.slice(0, 4)}…`);
  }
});
