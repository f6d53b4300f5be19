// deploy/nginx/bitrix-sync-public.conf: `nginx -t` accepts it, and a real nginx built from it (on
// loopback, with a throw-away certificate) passes a robot request to the receivers, keeps strangers
// and everything but the two routes out, bounds the request, and logs the route without the query.
// Needs the nginx binary (Debian package nginx); without it these tests are skipped, loudly.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ServerType, serve } from "@hono/node-server";
import test from "ava";
import { Agent, fetch as undiciFetch } from "undici";
import { freePort } from "../../../src/db/embedded.js";
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

const CONF = join(import.meta.dirname, "..", "..", "..", "deploy", "nginx", "bitrix-sync-public.conf");
const hasNginx = spawnSync("nginx", ["-v"]).status === 0;
const hasOpenssl = spawnSync("openssl", ["version"]).status === 0;
const run = hasNginx && hasOpenssl ? test.serial : test.skip;
if (!hasNginx || !hasOpenssl) {
  console.warn(
    `nginx.test.ts: SKIPPED, ${hasNginx ? "openssl" : "nginx"} is not installed (apt-get install -y nginx openssl)`,
  );
}

let dir: string;
let db: TestDb | undefined;
let app: ServerType | undefined;
const nginxes: Array<ReturnType<typeof spawn>> = [];
const tls = new Agent({ connect: { rejectUnauthorized: false } });

/** The shipped config with what a test machine lacks replaced: certificate, log paths, upstream, port. */
function siteConfig(opts: {
  port?: number;
  upstreamPort: number;
  allowLoopback: boolean;
  name: string;
}): string {
  let s = readFileSync(CONF, "utf8")
    .replaceAll("/etc/nginx/tls/bitrix-sync-public.crt", join(dir, "cert.pem"))
    .replaceAll("/etc/nginx/tls/bitrix-sync-public.key", join(dir, "key.pem"))
    .replaceAll("/var/log/nginx/bitrix-sync-public.", join(dir, `${opts.name}.`))
    .replace("server bitrix-sync:8080;", `server 127.0.0.1:${opts.upstreamPort};`);
  if (opts.port !== undefined) {
    s = s
      .replace("listen 443 ssl;", `listen 127.0.0.1:${opts.port} ssl;`)
      .replace("listen [::]:443 ssl;", "");
  }
  if (opts.allowLoopback) s = s.replace("deny all;\n\n", "allow 127.0.0.1;\n  deny all;\n\n");
  return s;
}

/** A complete nginx.conf around the site file, everything under `dir`. */
function mainConfig(name: string, site: string): string {
  const sitePath = join(dir, `${name}.site.conf`);
  writeFileSync(sitePath, site);
  const main = join(dir, `${name}.nginx.conf`);
  writeFileSync(
    main,
    [
      "master_process off;",
      "daemon off;",
      `pid ${join(dir, `${name}.pid`)};`,
      `error_log ${join(dir, `${name}.main-error.log`)} warn;`,
      "events { worker_connections 64; }",
      "http {",
      `  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;`,
      `  fastcgi_temp_path ${dir}/fcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;`,
      `  include ${sitePath};`,
      "}",
    ].join("\n"),
  );
  return main;
}

async function startNginx(main: string, port: number): Promise<void> {
  const p = spawn("nginx", ["-p", dir, "-c", main], { stdio: ["ignore", "ignore", "pipe"] });
  nginxes.push(p);
  let stderr = "";
  p.stderr?.on("data", (d) => {
    stderr += String(d);
  });
  for (let i = 0; i < 100; i++) {
    try {
      await undiciFetch(`https://127.0.0.1:${port}/`, { dispatcher: tls });
      return;
    } catch {
      if (p.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`nginx did not start: ${stderr}`);
}

let open: { port: number; name: string };
let closed: { port: number; name: string };

test.before(async () => {
  if (!hasNginx || !hasOpenssl) return;
  dir = mkdtempSync(join(tmpdir(), "bitrix-sync-nginx-"));
  const cert = spawnSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-keyout",
      join(dir, "key.pem"),
      "-out",
      join(dir, "cert.pem"),
    ],
    { stdio: "ignore" },
  );
  if (cert.status !== 0) throw new Error("openssl could not make a test certificate");
  db = await createTestDb();
  const service = makeApp(db.pool, captureLogger().log);
  await new Promise<void>((resolve) => {
    app = serve({ fetch: service.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve());
  });
  const upstreamPort = ((app as ServerType).address() as AddressInfo).port;
  open = { port: await freePort(), name: "open" };
  closed = { port: await freePort(), name: "closed" };
  await startNginx(
    mainConfig("open", siteConfig({ port: open.port, upstreamPort, allowLoopback: true, name: "open" })),
    open.port,
  );
  await startNginx(
    mainConfig(
      "closed",
      siteConfig({ port: closed.port, upstreamPort, allowLoopback: false, name: "closed" }),
    ),
    closed.port,
  );
});

test.after.always(async () => {
  for (const p of nginxes) p.kill("SIGTERM");
  await new Promise<void>((resolve) => (app ? app.close(() => resolve()) : resolve()));
  await db?.drop();
  await tls.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const form = { "content-type": "application/x-www-form-urlencoded" };
const url = (port: number, path: string) => `https://127.0.0.1:${port}${path}`;
const contactPath = (id: string) => `/bitrix/sync/webhook/contact?token=${TOKENS.contact}&ID=${id}`;

run("nginx -t accepts the shipped config (only paths and the upstream host replaced)", (t) => {
  const main = mainConfig("syntax", siteConfig({ upstreamPort: 8080, allowLoopback: false, name: "syntax" }));
  const r = spawnSync("nginx", ["-t", "-p", dir, "-c", main], { encoding: "utf8" });
  t.is(r.status, 0, r.stderr);
  t.regex(r.stderr, /test is successful/);
});

run("a robot request from an allowed peer reaches the receiver and is recorded", async (t) => {
  const before = await inboxCount((db as TestDb).pool);
  const res = await undiciFetch(url(open.port, contactPath("4242")), {
    method: "POST",
    headers: form,
    body: encodeForm(robotFields("contact", "4242")),
    dispatcher: tls,
  });
  t.is(res.status, 200);
  t.deepEqual(await res.json(), { status: "accepted" });
  t.is(await inboxCount((db as TestDb).pool), before + 1);
});

run("a peer outside the allow list gets 403 and nothing is recorded", async (t) => {
  const before = await inboxCount((db as TestDb).pool);
  const res = await undiciFetch(url(closed.port, contactPath("4243")), {
    method: "POST",
    headers: { ...form, "x-forwarded-for": "203.0.113.10" },
    body: encodeForm(robotFields("contact", "4243")),
    dispatcher: tls,
  });
  t.is(res.status, 403);
  t.deepEqual(await res.json(), { error: "forbidden" });
  t.is(await inboxCount((db as TestDb).pool), before);
});

run("only POST on the two exact routes; health, status and metrics are not published", async (t) => {
  const get = await undiciFetch(url(open.port, contactPath("1")), { dispatcher: tls });
  t.is(get.status, 403);
  t.deepEqual(await get.json(), { error: "forbidden" });
  for (const path of [
    "/health/ready",
    "/health/live",
    "/internal/sync/v1/status",
    "/metrics",
    "/bitrix/sync/webhook/contact/",
    "/bitrix/sync/webhook/deal",
  ]) {
    const res = await undiciFetch(url(open.port, path), {
      method: "POST",
      headers: form,
      body: "",
      dispatcher: tls,
      redirect: "manual",
    });
    t.is(res.status, 404, path);
    t.is(res.headers.get("location"), null, path);
    t.deepEqual(await res.json(), { error: "not_found" }, path);
  }
});

run("nginx bounds the body and the request line with generic replies", async (t) => {
  const big = await undiciFetch(url(open.port, contactPath("2")), {
    method: "POST",
    headers: form,
    body: `a=${"x".repeat(9000)}`,
    dispatcher: tls,
  });
  t.is(big.status, 413);
  t.deepEqual(await big.json(), { error: "payload_too_large" });
  const long = await undiciFetch(url(open.port, `${contactPath("2")}&pad=${"p".repeat(3000)}`), {
    method: "POST",
    headers: form,
    body: "",
    dispatcher: tls,
  });
  t.is(long.status, 414);
  t.false((await long.text()).includes(TOKENS.contact));
});

run("the access log has the route, never the query string; the error log has no token", async (t) => {
  // Upstream refusals and errors go through too: a wrong member id (403) and a bad form (400).
  await undiciFetch(url(open.port, contactPath("3")), {
    method: "POST",
    headers: form,
    body: "document_id%5B0%5D=crm",
    dispatcher: tls,
  });
  const access = readFileSync(join(dir, "open.access.log"), "utf8");
  t.true(access.includes('"route":"/bitrix/sync/webhook/contact"'));
  t.true(access.includes('"status":200'));
  let errors = "";
  for (const f of ["open.error.log", "open.main-error.log", "closed.access.log", "closed.error.log"]) {
    try {
      errors += readFileSync(join(dir, f), "utf8");
    } catch {
      // not written: nothing at that level
    }
  }
  for (const text of [access, errors]) {
    t.false(text.includes(TOKENS.contact));
    t.false(text.includes("token="));
    t.false(text.includes(MEMBER_ID));
  }
});
