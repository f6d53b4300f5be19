// The receivers behind a real listener on loopback (@hono/node-server, as in main.ts): the source IP
// comes from the TCP peer, bodies are bounded whether or not they declare a length, and nothing
// redirects.
import type { AddressInfo } from "node:net";
import { type ServerType, serve } from "@hono/node-server";
import test from "ava";
import {
  captureLogger,
  encodeForm,
  inboxCount,
  MEMBER_ID,
  makeApp,
  robotFields,
  TOKENS,
} from "../../helpers/receiver.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

let db: TestDb;
let server: ServerType;
let base: string;
const captured = captureLogger();

test.before(async () => {
  db = await createTestDb();
  const app = makeApp(db.pool, captured.log);
  await new Promise<void>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve());
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/bitrix/sync/webhook`;
});
test.after.always(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await db?.drop();
});

const form = { "content-type": "application/x-www-form-urlencoded" };

test.serial("a robot request over loopback is recorded with the socket peer as source_ip", async (t) => {
  const res = await fetch(`${base}/contact?token=${TOKENS.contact}&ID=321`, {
    method: "POST",
    headers: { ...form, "x-forwarded-for": "198.51.100.7" },
    body: encodeForm(robotFields("contact", "321")),
    redirect: "manual",
  });
  t.is(res.status, 200);
  t.deepEqual(await res.json(), { status: "accepted" });
  const { rows } = await db.pool.query<{ ip: string; entity_id: string }>(
    "select host(source_ip) as ip, entity_id from bitrix_sync.webhook_inbox order by id desc limit 1",
  );
  t.deepEqual(rows[0], { ip: "127.0.0.1", entity_id: "321" });
});

test.serial("a streamed (chunked) body over the limit is refused with 413", async (t) => {
  const before = await inboxCount(db.pool);
  const chunk = new TextEncoder().encode(`${encodeForm(robotFields("contact", "322"))}&auth%5Bpad%5D=`);
  const pad = new TextEncoder().encode("x".repeat(1024));
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(chunk);
      for (let i = 0; i < 10; i++) c.enqueue(pad);
      c.close();
    },
  });
  const res = await fetch(`${base}/contact?token=${TOKENS.contact}&ID=322`, {
    method: "POST",
    headers: form,
    body: stream,
    duplex: "half",
  } as RequestInit);
  t.is(res.status, 413);
  t.deepEqual(await res.json(), { error: "payload_too_large" });
  t.is(await inboxCount(db.pool), before);
});

test.serial("a declared length over the limit is refused before the body is read", async (t) => {
  const before = await inboxCount(db.pool);
  const res = await fetch(`${base}/contact?token=${TOKENS.contact}&ID=323`, {
    method: "POST",
    headers: form,
    body: "a=".padEnd(20_000, "x"),
  });
  t.is(res.status, 413);
  t.is(await inboxCount(db.pool), before);
});

test.serial("GET, HEAD and a trailing slash neither redirect nor write", async (t) => {
  const before = await inboxCount(db.pool);
  const get = await fetch(`${base}/contact?token=${TOKENS.contact}&ID=324`, { redirect: "manual" });
  t.is(get.status, 405);
  t.is(get.headers.get("allow"), "POST");
  const head = await fetch(`${base}/contact?token=${TOKENS.contact}&ID=324`, { method: "HEAD" });
  t.is(head.status, 405);
  const slash = await fetch(`${base}/contact/?token=${TOKENS.contact}&ID=324`, {
    method: "POST",
    headers: form,
    body: encodeForm(robotFields("contact", "324")),
    redirect: "manual",
  });
  t.is(slash.status, 404);
  t.is(slash.headers.get("location"), null);
  t.is(await inboxCount(db.pool), before);
});

test.serial("replies never echo the token, the member id or the body", async (t) => {
  const res = await fetch(`${base}/contact?token=${TOKENS.contact}&ID=9`, {
    method: "POST",
    headers: form,
    body: encodeForm(robotFields("contact", "10")),
  });
  t.is(res.status, 400);
  const text = await res.text();
  t.is(text, '{"error":"bad_request"}');
  for (const [k, v] of res.headers) {
    t.false(v.includes(TOKENS.contact), k);
    t.false(v.includes(MEMBER_ID), k);
  }
  t.false(captured.text().includes(TOKENS.contact));
});
