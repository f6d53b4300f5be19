// The official Bitrix24 JS SDK (@bitrix24/b24jssdk, its webhook client B24Hook) against the sandbox
// portal: the emulator behind a TLS proxy with a throw-away self-signed certificate (the SDK only
// speaks https), whose CA the test hands to the SDK's HTTP client (no verification is switched off).
// Every form in which the SDK touches Contacts: single calls (add, get, list, update, delete,
// duplicate search), manual paging with `next`, its list helpers (keyset paging), and its batch in
// both shapes with chaining by `$result[...]`, which the emulator resolves as the portal does.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { Agent, createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AjaxError, type AjaxResult, ApiVersion, B24Hook } from "@bitrix24/b24jssdk";
import test from "ava";
import { SANDBOX_FIELDS } from "../../../src/config/env.js";
import { type Emulator, startEmulator } from "../../../tools/emulator/server.js";

const F = SANDBOX_FIELDS;
let emu: Emulator;
let proxy: Server;
let ca: Buffer;
let hookUrl: string;
let b24: B24Hook;
const seen: Array<{ path: string; contentType: string }> = [];
const certDir = mkdtempSync(join(tmpdir(), "b24jssdk-tls-"));

// biome-ignore lint/suspicious/noExplicitAny: the SDK's results are untyped JSON, checked field by field
type Wire = any;

/** A B24Hook for the proxy whose HTTP client trusts only the test's CA. */
function hook(trust: Buffer | null, maxRetries?: number): B24Hook {
  const h = B24Hook.fromWebhookUrl(
    hookUrl,
    maxRetries === undefined ? undefined : { restrictionParams: { maxRetries } },
  );
  h.offClientSideWarning();
  if (trust) h.getHttpClient(ApiVersion.v2).ajaxClient.defaults.httpsAgent = new Agent({ ca: trust });
  return h;
}

test.before(async () => {
  // A certificate for 127.0.0.1 that lives as long as this test: nothing is fetched from anywhere.
  const key = join(certDir, "key.pem");
  const cert = join(certDir, "cert.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ],
    { stdio: "ignore" },
  );
  ca = readFileSync(cert);
  emu = await startEmulator({ fields: F });
  // TLS in front of the emulator, passing every request through unchanged.
  proxy = createServer({ key: readFileSync(key), cert: ca }, (req, res) => {
    seen.push({ path: req.url ?? "", contentType: String(req.headers["content-type"] ?? "") });
    const up = httpRequest(
      { host: "127.0.0.1", port: emu.port, method: req.method, path: req.url, headers: req.headers },
      (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        upRes.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const { port } = proxy.address() as AddressInfo;
  hookUrl = `https://127.0.0.1:${port}/rest/1/${emu.secret}`;
  b24 = hook(ca);
});

test.after.always(async () => {
  await new Promise<void>((resolve) => (proxy ? proxy.close(() => resolve()) : resolve()));
  await emu?.close();
  rmSync(certDir, { recursive: true, force: true });
});

async function call(method: string, params: Record<string, unknown>): Promise<AjaxResult<Wire>> {
  return (await b24.actions.v2.call.make({ method, params })) as AjaxResult<Wire>;
}

/** The SDK's error for a refused call (it throws AjaxError for a 4xx). */
async function refused(method: string, params: Record<string, unknown>): Promise<AjaxError> {
  try {
    await call(method, params);
  } catch (e) {
    if (e instanceof AjaxError) return e;
    throw e;
  }
  throw new Error(`${method} was not refused`);
}

test.serial("the SDK refuses the portal without the test's CA: TLS is verified for real", async (t) => {
  const untrusting = hook(null, 1);
  const e = await untrusting.actions.v2.call
    .make({ method: "crm.contact.list", params: { select: ["ID"] } })
    .then(
      () => null,
      (err: unknown) => err,
    );
  t.truthy(e, "a self-signed certificate is not accepted by default");
  t.is(emu.log.length, 0, "nothing reached the portal");
});

test.serial("crm.contact.add / get / update / list / delete, one call each, as JSON bodies", async (t) => {
  const add = await call("crm.contact.add", {
    fields: {
      NAME: "Anna",
      PHONE: [{ VALUE: "+79990001122", VALUE_TYPE: "MOBILE" }],
      EMAIL: [{ VALUE: "anna@example.org", VALUE_TYPE: "WORK" }],
      [F.registered]: 1,
    },
  });
  const id = add.getData()?.result as number;
  t.true(Number.isInteger(id) && id > 0);
  t.true(seen.some((s) => s.path.includes("crm.contact.add") && s.contentType.includes("application/json")));

  const got = (await call("crm.contact.get", { id })).getData()?.result;
  t.like(got, { ID: String(id), NAME: "Anna", [F.registered]: "1" });
  t.like(got.PHONE[0], { VALUE: "+79990001122", VALUE_TYPE: "MOBILE", TYPE_ID: "PHONE" });

  const upd = await call("crm.contact.update", {
    id,
    fields: { NAME: "Anna B", PHONE: [{ ID: got.PHONE[0].ID, VALUE: "+79990001133" }] },
  });
  t.is(upd.getData()?.result, true);
  const list = await call("crm.contact.list", {
    filter: { ID: id },
    select: ["ID", "NAME", "PHONE", "EMAIL"],
  });
  t.like(list.getData()?.result[0], { ID: String(id), NAME: "Anna B" });
  t.is(list.getData()?.result[0].PHONE[0].VALUE, "+79990001133");
  t.is(list.getTotal(), 1);

  t.is((await call("crm.contact.delete", { id })).getData()?.result, true);
  t.false(emu.store.contacts.has(id));
  const gone = await refused("crm.contact.get", { id });
  t.is(gone.status, 400);
  const again = await refused("crm.contact.delete", { id });
  t.is(again.status, 400, "a missing Contact: 400 (empty code, a description)");
  const bad = await refused("crm.contact.delete", { id: "x" });
  t.is(bad.status, 400);
});

test.serial("crm.duplicate.findbycomm: the Contact's ID, and [] when nothing matches", async (t) => {
  const c = emu.store.createContact({
    name: "Dup",
    phones: [{ value: "+79990002200", valueType: "MOBILE" }],
  });
  const hit = await call("crm.duplicate.findbycomm", {
    entity_type: "CONTACT",
    type: "PHONE",
    values: ["+79990002200"],
  });
  t.deepEqual(hit.getData()?.result, { CONTACT: [c.id] });
  const none = await call("crm.duplicate.findbycomm", {
    entity_type: "CONTACT",
    type: "PHONE",
    values: ["+79990002299"],
  });
  t.deepEqual(none.getData()?.result, []);
});

test.serial("list paging: next/total by hand, and the SDK's keyset list helpers", async (t) => {
  for (let i = 0; i < 120; i++) emu.store.createContact({ name: "Page", secondName: String(i) });
  const wanted = [...emu.store.contacts.values()].filter((c) => c.name === "Page").map((c) => String(c.id));

  // By hand: start/next, 50 rows a page, total counted.
  let page = await call("crm.contact.list", {
    filter: { NAME: "Page" },
    select: ["ID"],
    order: { ID: "ASC" },
  });
  t.is(page.getTotal(), 120);
  const byHand: string[] = page.getData()?.result.map((r: Wire) => r.ID);
  let pages = 1;
  while (page.isMore()) {
    const next = await page.getNext(b24.getHttpClient(ApiVersion.v2));
    if (next === false) break;
    page = next as AjaxResult<Wire>;
    byHand.push(...(page.getData()?.result ?? []).map((r: Wire) => r.ID));
    pages++;
  }
  t.is(pages, 3);
  t.deepEqual(byHand, wanted);

  // callList: `>ID` keyset with start=-1 until a short page.
  const all = await b24.actions.v2.callList.make({
    method: "crm.contact.list",
    params: { filter: { NAME: "Page" }, select: ["ID"] },
    idKey: "ID",
  });
  t.true(all.isSuccess);
  t.deepEqual(
    (all.getData() as Wire[]).map((r) => r.ID),
    wanted,
  );

  // fetchList: the same, streamed by chunk.
  const sizes: number[] = [];
  for await (const chunk of b24.actions.v2.fetchList.make({
    method: "crm.contact.list",
    params: { filter: { NAME: "Page" }, select: ["ID"] },
    idKey: "ID",
  })) {
    sizes.push(chunk.length);
  }
  t.deepEqual(sizes, [50, 50, 20]);

  // The universal list of Contacts, keyed `id` inside `items`.
  const items = await b24.actions.v2.callList.make({
    method: "crm.item.list",
    params: { entityTypeId: 3, filter: { name: "Page" }, select: ["id"] },
    idKey: "id",
    customKeyForResult: "items",
  });
  t.is((items.getData() as Wire[]).length, 120);
});

test.serial(
  "batch with chaining by $result[...], object form: each command sees the ones before",
  async (t) => {
    const r = await b24.actions.v2.batch.make({
      calls: {
        add: {
          method: "crm.contact.add",
          params: { fields: { NAME: "Chain", PHONE: [{ VALUE: "+79990003300", VALUE_TYPE: "MOBILE" }] } },
        },
        get: { method: "crm.contact.get", params: { id: "$result[add]" } },
        find: {
          method: "crm.duplicate.findbycomm",
          params: { entity_type: "CONTACT", type: "PHONE", values: ["$result[get][PHONE][0][VALUE]"] },
        },
        upd: {
          method: "crm.contact.update",
          params: { id: "$result[add]", fields: { LAST_NAME: "$result[get][NAME]" } },
        },
        list: {
          method: "crm.contact.list",
          params: { filter: { ID: "$result[add]" }, select: ["ID", "NAME", "LAST_NAME"] },
        },
      },
      options: { isHaltOnError: true },
    });
    t.true(r.isSuccess);
    const data = r.getData() as Wire;
    const id = data.add as number;
    t.true(Number.isInteger(id) && id > 0);
    t.like(data.get, { ID: String(id), NAME: "Chain" });
    t.deepEqual(data.find, { CONTACT: [id] });
    t.is(data.upd, true);
    t.deepEqual(data.list, [{ ID: String(id), NAME: "Chain", LAST_NAME: "Chain" }]);
    t.is(emu.store.contacts.get(id)?.lastName, "Chain");
    const last = emu.log.at(-1);
    t.like(last, { method: "batch", batchSize: 5 });
    t.true(seen.at(-1)?.contentType.includes("application/json"));
  },
);

test.serial("batch, array form: $result[0] chains, delete included; a failing command halts", async (t) => {
  const r = await b24.actions.v2.batch.make({
    calls: [
      ["crm.contact.add", { fields: { NAME: "Short-lived" } }],
      ["crm.contact.get", { id: "$result[0]" }],
      ["crm.contact.delete", { id: "$result[0]" }],
    ],
    options: { isHaltOnError: true },
  });
  t.true(r.isSuccess);
  const [id, got, deleted] = r.getData() as Wire[];
  t.like(got, { ID: String(id), NAME: "Short-lived" });
  t.is(deleted, true);
  t.false(emu.store.contacts.has(id));

  // A get of the deleted Contact fails with the legacy empty error code and halts the batch. The
  // SDK (2.2.0) reads an empty `error` as no error at all: the entry comes back as a success
  // without a result, and the list after it never ran.
  const halted = await b24.actions.v2.batch.make({
    calls: [
      ["crm.contact.get", { id }],
      ["crm.contact.list", { select: ["ID"] }],
    ],
    options: { isHaltOnError: true },
  });
  t.deepEqual(halted.getData(), [undefined]);
  t.deepEqual(emu.log.at(-1)?.commands, ["crm.contact.get"], "halt: nothing ran after the failure");
});

test.serial("batchByChunk splits more than 50 Contact calls into batches of 50", async (t) => {
  const ids = [...emu.store.contacts.keys()].slice(0, 60);
  const before = emu.log.length;
  const r = await b24.actions.v2.batchByChunk.make({
    calls: ids.map((id) => ["crm.contact.get", { id }] as [string, Record<string, unknown>]),
    options: { isHaltOnError: true },
  });
  t.true(r.isSuccess);
  t.deepEqual(
    (r.getData() as Wire[]).map((c) => Number(c.ID)),
    ids,
  );
  t.deepEqual(
    emu.log.slice(before).map((e) => e.batchSize),
    [50, 10],
  );
});
