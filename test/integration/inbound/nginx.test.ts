// The public nginx rendered from the configuration (`npm run render:nginx`, src/config/nginx.ts) in
// front of the service's receivers, all real and on loopback: nginx from the Debian package, the
// service's app built by loadConfig from the same environment, a test database. The allow-list holds
// 127.0.0.2/32; clients bind to 127.0.0.2 or 127.0.0.3 as their source address. nginx reaches the
// service from 127.0.0.1, the only trusted proxy. nginx's own refusals reach the service's refusal
// route (src/inbound/edge.ts), which counts them and journals refused addresses in the database;
// every request to that route is recorded here to show what nginx passes (and what it does not).
// Without nginx or openssl these tests are skipped, loudly (apt-get install -y nginx openssl;
// .ci/run installs both).
import type { ChildProcess } from "node:child_process";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import net from "node:net";
import { join } from "node:path";
import tls from "node:tls";
import { type ServerType, serve } from "@hono/node-server";
import test from "ava";
import { Agent, fetch as undiciFetch } from "undici";
import { EDGE_REFUSAL_PATH } from "../../../src/config/edge-contract.js";
import { loadConfig } from "../../../src/config/env.js";
import { freePort } from "../../../src/db/embedded.js";
import { createApp } from "../../../src/http/app.js";
import { receiverConfig } from "../../../src/inbound/config.js";
import { RefusedSourceJournal } from "../../../src/inbound/edge.js";
import { projectRoot } from "../../../src/local/project-root.js";
import { webhookRejected } from "../../../src/observability/metrics.js";
import {
  hasNginx,
  hasOpenssl,
  mainConfig,
  type NginxSandbox,
  nginxSandbox,
  nginxTest,
  renderNginxCli,
  startNginx,
} from "../../helpers/nginx.js";
import {
  captureLogger,
  encodeForm,
  inboxCount,
  MEMBER_ID,
  PORTAL_HOST,
  robotFields,
  TOKENS,
} from "../../helpers/receiver.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

const run = hasNginx && hasOpenssl ? test.serial : test.skip;
if (!hasNginx || !hasOpenssl) {
  console.warn(
    `nginx.test.ts: SKIPPED, ${hasNginx ? "openssl" : "nginx"} is not installed (apt-get install -y nginx openssl)`,
  );
}

const ALLOWED = "127.0.0.2";
const STRANGER = "127.0.0.3";

let box: NginxSandbox;
let db: TestDb;
let app: ServerType | undefined;
let appPort: number;
let port: number;
let tightPort: number;
let siteFile: string;
let journal: RefusedSourceJournal;
const healthPorts = new Map<string, number>();

/** What reached the service's refusal route, exactly as it arrived. */
interface EdgeRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
}
const edgeRequests: EdgeRequest[] = [];
const nginxes: ChildProcess[] = [];
const captured = captureLogger();
const agents: Agent[] = [];

/** A client whose connections leave from `local`. */
function client(local: string): Agent {
  const a = new Agent({ localAddress: local, connect: { rejectUnauthorized: false } });
  agents.push(a);
  return a;
}
let fromAllowed: Agent;
let fromStranger: Agent;

/** The environment of this deployment: the service's variables and secrets, and nginx's. */
function environment(box: NginxSandbox, extra: Record<string, string>): Record<string, string> {
  return {
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_CONTACT_RECEIVER_TOKEN: TOKENS.contact,
    BITRIX_SYNC_ALERT_RECEIVER_TOKEN: TOKENS.alert,
    BITRIX_SYNC_PORTAL_HOST: PORTAL_HOST,
    BITRIX_SYNC_PORTAL_MEMBER_ID: MEMBER_ID,
    BITRIX_WEBHOOK_ALLOWED_CIDRS: `${ALLOWED}/32`,
    BITRIX_SYNC_TRUSTED_PROXY_CIDRS: "127.0.0.1/32",
    BITRIX_SYNC_NGINX_SERVER_NAME: "localhost",
    BITRIX_SYNC_NGINX_TLS_CERTIFICATE: box.cert,
    BITRIX_SYNC_NGINX_TLS_CERTIFICATE_KEY: box.key,
    ...extra,
  };
}

/** Renders a site with the CLI, wraps it in a main config and starts nginx on `port`. */
function deployEnv(name: string, port: number, healthPort: number, extra: Record<string, string> = {}) {
  return environment(box, {
    BITRIX_SYNC_NGINX_LISTEN: `127.0.0.1:${port}`,
    BITRIX_SYNC_NGINX_UPSTREAM: `127.0.0.1:${appPort}`,
    BITRIX_SYNC_NGINX_ACCESS_LOG: join(box.dir, `${name}.access.log`),
    BITRIX_SYNC_NGINX_ERROR_LOG: join(box.dir, `${name}.error.log`),
    BITRIX_SYNC_NGINX_HEALTH_LISTEN: `127.0.0.1:${healthPort}`,
    ...extra,
  });
}

async function deploy(
  name: string,
  port: number,
  extra: Record<string, string> = {},
  args: readonly string[] = [],
): Promise<string> {
  const healthPort = await freePort();
  healthPorts.set(name, healthPort);
  const env = deployEnv(name, port, healthPort, extra);
  const site = join(box.dir, `${name}.site.conf`);
  const r = renderNginxCli(env, site, args);
  if (r.status !== 0) throw new Error(`render:nginx failed: ${r.stderr}`);
  nginxes.push(await startNginx(box, mainConfig(box, name, site), port));
  return site;
}

test.before(async () => {
  if (!hasNginx || !hasOpenssl) return;
  box = nginxSandbox();
  db = await createTestDb();
  // The receivers exactly as main.ts builds them, from the environment nginx is rendered from.
  const config = loadConfig(environment(box, {}));
  journal = new RefusedSourceJournal(db.pool, captured.log, { flushMs: 60_000 });
  const service = createApp({
    pool: db.pool,
    log: captured.log,
    receiver: receiverConfig(config),
    refusedSources: journal,
  });
  const fetch = async (req: Request, env: unknown) => {
    if (new URL(req.url).pathname === EDGE_REFUSAL_PATH) {
      edgeRequests.push({
        method: req.method,
        url: req.url,
        headers: Object.fromEntries(req.headers.entries()),
        body: await req.clone().text(),
      });
    }
    return service.fetch(req, env as never);
  };
  await new Promise<void>((resolve) => {
    app = serve({ fetch, port: 0, hostname: "127.0.0.1" }, () => resolve());
  });
  appPort = ((app as ServerType).address() as AddressInfo).port;
  port = await freePort();
  tightPort = await freePort();
  siteFile = await deploy("public", port);
  await deploy("tight", tightPort, { BITRIX_SYNC_NGINX_RATE_PER_SEC: "1", BITRIX_SYNC_NGINX_BURST: "0" });
  fromAllowed = client(ALLOWED);
  fromStranger = client(STRANGER);
});

test.after.always(async () => {
  for (const p of nginxes) p.kill("SIGTERM");
  await Promise.all(agents.map((a) => a.close()));
  await new Promise<void>((resolve) => (app ? app.close(() => resolve()) : resolve()));
  await db?.drop();
  box?.remove();
});

const form = { "content-type": "application/x-www-form-urlencoded" };
const contactPath = (id: string) => `/bitrix/sync/webhook/contact?token=${TOKENS.contact}&ID=${id}`;
// By the server's name (localhost is 127.0.0.1 here): the TLS handshake must name it (SNI) and so
// must the Host header, or the default server drops the request.
const viaNginx = (path: string, p = port) => `https://localhost:${p}${path}`;
const robot = (id: string) => encodeForm(robotFields("contact", id));

function post(agent: Agent, url: string, body: string, headers: Record<string, string> = {}) {
  return undiciFetch(url, {
    method: "POST",
    headers: { ...form, ...headers },
    body,
    dispatcher: agent,
    redirect: "manual",
  });
}

/** How many refusals the service has counted for `receiver` and `reason`. */
async function rejected(receiver: string, reason: string): Promise<number> {
  const m = await webhookRejected.get();
  return m.values.find((v) => v.labels.receiver === receiver && v.labels.reason === reason)?.value ?? 0;
}

/** The journal of refused sources as the runbook reads it (after writing what was gathered). */
async function refusedSources(): Promise<
  Array<{ ip: string; receiver: string; refusals: number; new: boolean }>
> {
  await journal.flush();
  const { rows } = await db.pool.query(
    "select host(source_ip) as ip, receiver, refusals::int, new from bitrix_sync.status_refused_sources",
  );
  return rows;
}

async function sourceIpsOf(entityId: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ ip: string }>(
    "select host(source_ip) as ip from bitrix_sync.webhook_inbox where entity_id = $1 order by id",
    [entityId],
  );
  return rows.map((r) => r.ip);
}

/** The access log's JSON lines. */
function accessLines(name: string): Array<Record<string, unknown>> {
  return readFileSync(join(box.dir, `${name}.access.log`), "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

run("render:nginx refuses an empty allow-list while the receivers are enabled", (t) => {
  const out = join(box.dir, "refused.site.conf");
  const r = renderNginxCli(environment(box, { BITRIX_WEBHOOK_ALLOWED_CIDRS: "" }), out);
  t.is(r.status, 78);
  t.regex(r.stderr, /BITRIX_WEBHOOK_ALLOWED_CIDRS: empty while the receivers are enabled/);
  t.false(r.stderr.includes(TOKENS.contact));
  t.throws(() => readFileSync(out));
});

run("nginx -t accepts the rendered file (non-root friendly: temp prefix, pid and paths)", (t) => {
  const r = nginxTest(box, mainConfig(box, "syntax", siteFile));
  t.is(r.status, 0, r.stderr);
  t.regex(r.stderr, /test is successful/);
  const site = readFileSync(siteFile, "utf8");
  t.true(site.includes(`allow ${ALLOWED}/32;`));
  // No directive may log or pass on the raw request line or query (comments name them: skip those).
  const code = site.replace(/#.*$/gm, "");
  t.notRegex(code, /\$request_uri|\$args|\$query_string|\$request\b/);
});

run("compose's main nginx.conf (unprivileged, everything under /tmp) accepts the rendered file", (t) => {
  const main = join(box.dir, "compose.nginx.conf");
  const shipped = readFileSync(join(projectRoot, "deploy", "nginx", "nginx.conf"), "utf8");
  t.regex(shipped, /include \/etc\/nginx\/bitrix-sync\/\*\.conf;/);
  t.notRegex(shipped, /^\s*user\s/m, "no user directive: nginx runs as the container's user");
  writeFileSync(main, shipped.replace("/etc/nginx/bitrix-sync/*.conf", siteFile));
  // It logs to /dev/stderr, which must be a file or a pipe (a container's is), not Node's socket.
  const err = join(box.dir, "compose-t.stderr");
  const fd = openSync(err, "w");
  try {
    const r = nginxTest(box, main, fd);
    t.is(r.status, 0, readFileSync(err, "utf8"));
  } finally {
    closeSync(fd);
  }
});

run(
  "a robot from an allowed address gets through; source_ip is the robot's, whatever it claims",
  async (t) => {
    const res = await post(fromAllowed, viaNginx(contactPath("4242")), robot("4242"), {
      "x-real-ip": "198.51.100.7",
      "x-forwarded-for": "198.51.100.8",
    });
    t.is(res.status, 200);
    t.deepEqual(await res.json(), { status: "accepted" });
    t.deepEqual(await sourceIpsOf("4242"), [ALLOWED]);
  },
);

run(
  "a robot call from outside the allow-list: 403 and no row; counted as source_ip, its address journaled, nothing of it passed on",
  async (t) => {
    const before = await inboxCount(db.pool);
    const counted = await rejected("contact", "source_ip");
    const seen = edgeRequests.length;
    const res = await post(fromStranger, viaNginx(contactPath("4243")), robot("4243"), {
      "x-real-ip": ALLOWED,
      "x-forwarded-for": ALLOWED,
      cookie: "session=4243",
      "x-bitrix-sync-refusal": "not_found",
      "x-bitrix-sync-receiver": "alert",
    });
    t.is(res.status, 403);
    t.deepEqual(await res.json(), { error: "forbidden" });
    t.is(res.headers.get("cache-control"), null, "nginx's own refusal, not the service's answer");
    t.is(await inboxCount(db.pool), before);
    t.deepEqual(await sourceIpsOf("4243"), []);
    const refused = accessLines("public").filter((l) => l.reason === "source_ip");
    t.deepEqual(
      refused.map((l) => [l.peer, l.receiver, l.route, l.status]),
      [[STRANGER, "contact", "/bitrix/sync/webhook/contact", 403]],
    );
    // Counted by the service under the reason nginx gave, not the one the client claimed.
    t.is(await rejected("contact", "source_ip"), counted + 1);
    // What nginx passed: the reason, the route and the peer, nothing of the request.
    const edge = edgeRequests.slice(seen);
    t.is(edge.length, 1);
    const e = edge[0] as EdgeRequest;
    t.is(e.method, "POST");
    t.is(new URL(e.url).pathname, EDGE_REFUSAL_PATH);
    t.is(new URL(e.url).search, "");
    t.is(e.body, "");
    const passed = new Set([
      "connection",
      "host",
      "x-bitrix-sync-receiver",
      "x-bitrix-sync-refusal",
      "x-real-ip",
    ]);
    t.deepEqual(
      Object.keys(e.headers).filter((h) => !passed.has(h)),
      [],
      "no header of the client's (cookie, content type, forwarded addresses)",
    );
    t.like(e.headers, {
      "x-bitrix-sync-refusal": "source_ip",
      "x-bitrix-sync-receiver": "contact",
      "x-real-ip": STRANGER,
    });
    t.false(JSON.stringify(e).includes(TOKENS.contact), "no token");
    t.false(JSON.stringify(e).includes("session=4243"), "no header of the client's");
    t.false(JSON.stringify(e).includes("4243"), "no query, no body");
    // The journal says which address, on which route, and that it is new.
    const journaled = (await refusedSources()).find((r) => r.ip === STRANGER && r.receiver === "contact");
    t.like(journaled, { ip: STRANGER, receiver: "contact", new: true });
    t.true((journaled?.refusals ?? 0) >= 1);
  },
);

run("nginx's other refusals are counted by reason; the client still gets nginx's own page", async (t) => {
  const cases: Array<[string, () => Promise<Response>, number, string, string]> = [
    [
      "method",
      () => undiciFetch(viaNginx(contactPath("4250")), { dispatcher: fromAllowed }),
      403,
      "contact",
      "method_not_allowed",
    ],
    [
      "unknown path",
      () => post(fromAllowed, viaNginx("/bitrix/sync/webhook/deal"), ""),
      404,
      "none",
      "not_found",
    ],
    [
      "body",
      () => post(fromAllowed, viaNginx(contactPath("4251")), `a=${"x".repeat(9000)}`),
      413,
      "contact",
      "body_too_large",
    ],
    [
      "outsider, any path",
      () => undiciFetch(viaNginx("/"), { dispatcher: fromStranger }),
      403,
      "none",
      "source_ip",
    ],
  ];
  for (const [what, send, status, receiver, reason] of cases) {
    const before = await rejected(receiver, reason);
    const res = await send();
    t.is(res.status, status, what);
    t.is(res.headers.get("cache-control"), null, what);
    await res.arrayBuffer();
    t.is(await rejected(receiver, reason), before + 1, what);
  }
});

run("the refusal route counts only the reasons and routes it knows", async (t) => {
  const before = await rejected("contact", "source_ip");
  // Loopback is trusted (nginx on the same host); an untrusted peer gets 404 (test/unit/inbound/edge.test.ts).
  for (const headers of [
    { "x-bitrix-sync-refusal": "nonsense", "x-bitrix-sync-receiver": "contact" },
    { "x-bitrix-sync-refusal": "source_ip", "x-bitrix-sync-receiver": "deal" },
    { "x-bitrix-sync-receiver": "contact" },
  ]) {
    const res = await undiciFetch(`http://127.0.0.1:${appPort}${EDGE_REFUSAL_PATH}`, {
      method: "POST",
      headers,
      dispatcher: fromAllowed,
    });
    t.is(res.status, 400, JSON.stringify(headers));
    await res.arrayBuffer();
  }
  t.is(await rejected("contact", "source_ip"), before);
});

run("when the service cannot be reached, a refused client still gets nginx's own 403", async (t) => {
  const downPort = await freePort();
  const closed = await freePort();
  await deploy("down", downPort, { BITRIX_SYNC_NGINX_UPSTREAM: `127.0.0.1:${closed}` });
  const res = await post(fromStranger, viaNginx(contactPath("4260"), downPort), robot("4260"));
  t.is(res.status, 403);
  t.deepEqual(await res.json(), { error: "forbidden" });
  const line = accessLines("down").at(-1);
  t.like(line, { status: 403, reason: "source_ip", upstream_status: "502" });
});

run("nginx answers its own health on its loopback listener, and nothing else there", async (t) => {
  const port = healthPorts.get("public") as number;
  const ok = await undiciFetch(`http://127.0.0.1:${port}/nginx-health`);
  t.is(ok.status, 200);
  t.is(await ok.text(), "ok\n");
  const other = await undiciFetch(`http://127.0.0.1:${port}/bitrix/sync/webhook/contact`);
  t.is(other.status, 404);
  await other.arrayBuffer();
  t.false(readFileSync(siteFile, "utf8").includes(`listen 0.0.0.0:${port}`));
});

run(
  "render:nginx shows what Bitrix24's published list changes; --check writes nothing; the list rendered admits the new address",
  async (t) => {
    const list = join(box.dir, "bitrix24-outbound.txt");
    writeFileSync(list, `# Bitrix24 outbound addresses, as downloaded\n${ALLOWED}\n${STRANGER} # new\n`);
    const before = readFileSync(siteFile, "utf8");
    const check = renderNginxCli(deployEnv("public", port, healthPorts.get("public") as number), siteFile, [
      "--published",
      list,
      "--check",
    ]);
    t.is(check.status, 1, check.stderr);
    t.regex(check.stdout, /allow-list: BITRIX_WEBHOOK_ALLOWED_CIDRS -> .*bitrix24-outbound\.txt/);
    t.regex(check.stdout, new RegExp(`\\n {2}\\+ ${STRANGER.replaceAll(".", "\\.")}/32\\n`));
    t.regex(check.stdout, /1 added, 0 removed, 1 unchanged/);
    t.regex(check.stdout, new RegExp(`BITRIX_WEBHOOK_ALLOWED_CIDRS=${ALLOWED}/32,${STRANGER}/32`));
    t.regex(check.stdout, /nothing written/);
    t.is(readFileSync(siteFile, "utf8"), before, "--check leaves the file as it was");
    t.false(check.stdout.includes(TOKENS.contact));

    // Written with the published list: the same robot call from the new address now goes through.
    const widePort = await freePort();
    await deploy("published", widePort, {}, ["--published", list]);
    const res = await post(fromStranger, viaNginx(contactPath("4270"), widePort), robot("4270"));
    t.is(res.status, 200);
    t.deepEqual(await sourceIpsOf("4270"), [STRANGER]);
    // The same list again: no difference.
    const again = renderNginxCli(
      deployEnv("published", widePort, healthPorts.get("published") as number),
      join(box.dir, "published.site.conf"),
      ["--published", list, "--check"],
    );
    t.regex(again.stdout, /1 added/, "against the reviewed configuration, still one to add");
    const same = renderNginxCli(
      deployEnv("published", widePort, healthPorts.get("published") as number, {
        BITRIX_WEBHOOK_ALLOWED_CIDRS: `${ALLOWED}/32,${STRANGER}/32`,
      }),
      join(box.dir, "published.site.conf"),
      ["--check"],
    );
    t.is(same.status, 0, same.stdout + same.stderr);
    t.regex(same.stdout, /no difference \(2 network\(s\)\)/);
  },
);

run("straight to the service, an untrusted peer cannot choose its source_ip", async (t) => {
  const res = await post(fromStranger, `http://127.0.0.1:${appPort}${contactPath("4244")}`, robot("4244"), {
    "x-real-ip": ALLOWED,
  });
  t.is(res.status, 200);
  t.deepEqual(await sourceIpsOf("4244"), [STRANGER]);
});

run("only POST on the two exact routes; health, status and metrics are not published", async (t) => {
  const get = await undiciFetch(viaNginx(contactPath("1")), { dispatcher: fromAllowed });
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
    const res = await post(fromAllowed, viaNginx(path), "");
    t.is(res.status, 404, path);
    t.is(res.headers.get("location"), null, path);
    t.deepEqual(await res.json(), { error: "not_found" }, path);
  }
  t.true(accessLines("public").some((l) => l.reason === "method_not_allowed" && l.receiver === "contact"));
});

run("nginx bounds the body and the request line with generic replies", async (t) => {
  const big = await post(fromAllowed, viaNginx(contactPath("2")), `a=${"x".repeat(9000)}`);
  t.is(big.status, 413);
  t.deepEqual(await big.json(), { error: "payload_too_large" });
  const long = await post(fromAllowed, viaNginx(`${contactPath("2")}&pad=${"p".repeat(3000)}`), "");
  t.is(long.status, 414);
  t.false((await long.text()).includes(TOKENS.contact));
});

run("nginx limits the request rate per peer with a generic 429", async (t) => {
  const statuses: number[] = [];
  const counted = await rejected("contact", "rate_limited");
  for (let i = 0; i < 4; i++) {
    const res = await post(fromAllowed, viaNginx(contactPath(`50${i}`), tightPort), robot(`50${i}`));
    statuses.push(res.status);
    if (res.status === 429) t.deepEqual(await res.json(), { error: "too_many_requests" });
    else await res.arrayBuffer();
  }
  t.is(statuses[0], 200);
  t.true(statuses.slice(1).includes(429), String(statuses));
  t.is(await rejected("contact", "rate_limited"), counted + statuses.filter((x) => x === 429).length);
  t.true(accessLines("tight").some((l) => l.reason === "rate_limited"));
});

run("no nginx log holds the token, the query string or the member id", async (t) => {
  // Upstream refusals go through too: a bad form (400).
  await post(fromAllowed, viaNginx(contactPath("3")), "document_id%5B0%5D=crm");
  const logs = box.logs();
  t.true(logs.some((l) => l.file === "public.access.log" && l.text.includes('"status":400')));
  for (const { file, text } of logs) {
    for (const secret of [TOKENS.contact, "token=", "?", MEMBER_ID]) {
      t.false(text.includes(secret), `${file} contains ${secret === "?" ? "a query" : "a secret"}`);
    }
  }
});

/** What a raw TLS client gets: the handshake refused, or the answer's bytes (empty: dropped unanswered). */
function rawRequest(opts: {
  servername?: string;
  host: string;
  path: string;
  body: string;
}): Promise<{ refused: true } | { refused: false; answer: string }> {
  return new Promise((resolve) => {
    // From an allowed address: a TCP socket of that origin, then TLS over it.
    const tcp = net.connect({ host: "127.0.0.1", port, localAddress: ALLOWED });
    const socket = tls.connect({
      socket: tcp,
      rejectUnauthorized: false,
      ...(opts.servername !== undefined ? { servername: opts.servername } : {}),
    });
    tcp.on("error", () => undefined);
    let answer = "";
    let secure = false;
    socket.on("secureConnect", () => {
      secure = true;
      socket.write(
        `POST ${opts.path} HTTP/1.1\r\nHost: ${opts.host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${Buffer.byteLength(opts.body)}\r\nConnection: close\r\n\r\n${opts.body}`,
      );
    });
    socket.on("data", (d: Buffer) => {
      answer += d.toString("utf8");
    });
    socket.on("error", () => undefined);
    socket.on("close", () => resolve(secure ? { refused: false, answer } : { refused: true }));
  });
}

run(
  "another host name gets no answer at all (444); a handshake naming another host, or none, is refused",
  async (t) => {
    const before = await inboxCount(db.pool);
    const path = contactPath("4601");
    const body = robot("4601");
    const named = await rawRequest({ servername: "localhost", host: `localhost:${port}`, path, body });
    t.false(named.refused);
    t.regex(named.refused ? "" : named.answer, /^HTTP\/1\.1 200 /, "the server's own name works");
    const otherHost = await rawRequest({ servername: "localhost", host: "evil.example", path, body });
    t.deepEqual(otherHost, { refused: false, answer: "" }, "dropped: not a byte back");
    t.deepEqual(await rawRequest({ servername: "evil.example", host: "evil.example", path, body }), {
      refused: true,
    });
    t.deepEqual(
      await rawRequest({ host: "127.0.0.1", path, body }),
      { refused: true },
      "no server name (SNI) at all",
    );
    t.is(await inboxCount(db.pool), before + 1, "only the request to the server's name was recorded");
    t.true(accessLines("public").some((l) => l.status === 444));
  },
);

run("every answer carries Strict-Transport-Security, nginx's own refusals too", async (t) => {
  const hsts = "max-age=63072000";
  const ok = await post(fromAllowed, viaNginx(contactPath("4602")), robot("4602"));
  t.is(ok.status, 200);
  t.is(ok.headers.get("strict-transport-security"), hsts);
  const forbidden = await post(fromStranger, viaNginx(contactPath("4603")), robot("4603"));
  t.is(forbidden.status, 403);
  t.is(forbidden.headers.get("strict-transport-security"), hsts);
  const missing = await post(fromAllowed, viaNginx("/metrics"), "");
  t.is(missing.status, 404);
  t.is(missing.headers.get("strict-transport-security"), hsts);
  await Promise.all([ok.arrayBuffer(), forbidden.arrayBuffer(), missing.arrayBuffer()]);
});

run(
  "the route chooses the limit: junk tokens on another route are limited like no token, and a robot's call still passes",
  async (t) => {
    // A fresh nginx with the default limits: 30 a minute with a burst of 10 on every route but the
    // robots', 100 a second with a burst of 500 on theirs. One allowed address floods a path that
    // is no receiver, every other request with a made-up token, the rest with none.
    const routesPort = await freePort();
    await deploy("routes", routesPort);
    const junk = [`token=${"f".repeat(32)}`, "token=", `token=${TOKENS.contact}`, "token=x&token=y"];
    const counted = await rejected("none", "rate_limited");
    const sent: Array<{ token: boolean; status: number }> = [];
    for (let i = 0; i < 16; i++) {
      const query = i % 2 === 0 ? `?${junk[(i / 2) % junk.length]}&ID=48${i}` : `?ID=48${i}`;
      const res = await post(fromAllowed, viaNginx(`/bitrix/sync/webhook/deal${query}`, routesPort), "");
      sent.push({ token: i % 2 === 0, status: res.status });
      if (res.status === 429) t.deepEqual(await res.json(), { error: "too_many_requests" });
      else await res.arrayBuffer();
    }
    const statuses = sent.map((s) => s.status);
    // One budget for the address, whatever the query carries: the burst passes (404), then 429 for
    // both kinds alike.
    t.deepEqual(statuses.slice(0, 11), Array(11).fill(404), String(statuses));
    t.deepEqual(statuses.slice(11), Array(5).fill(429), String(statuses));
    t.true(sent.some((s) => s.token && s.status === 429));
    t.true(sent.some((s) => !s.token && s.status === 429));
    // Counted by the service as rate_limited on no receiver, and logged so, the query nowhere.
    t.is(await rejected("none", "rate_limited"), counted + 5);
    const limited = accessLines("routes").filter((l) => l.reason === "rate_limited");
    t.deepEqual(
      limited.map((l) => [l.peer, l.route, l.receiver, l.status]),
      Array(5).fill([ALLOWED, "other", "none", 429]),
    );

    // The same address's robot call meanwhile: the robot route's own limit only.
    const ok = await post(fromAllowed, viaNginx(contactPath("4890"), routesPort), robot("4890"));
    t.is(ok.status, 200);
    t.deepEqual(await ok.json(), { status: "accepted" });
    // And on the robot route a request without a token, or with a junk one, meets that same limit:
    // well within it, each is the service's own 403 (token_invalid), never the tight limit's 429.
    for (const query of ["?ID=4891", `?${junk[0]}&ID=4892`, "?ID=4893", `?${junk[3]}&ID=4894`]) {
      const res = await post(fromAllowed, viaNginx(`/bitrix/sync/webhook/contact${query}`, routesPort), "");
      t.is(res.status, 403, query);
      t.is(res.headers.get("cache-control"), "no-store", "the service's answer");
      await res.arrayBuffer();
    }
    const again = await post(fromAllowed, viaNginx(contactPath("4895"), routesPort), robot("4895"));
    t.is(again.status, 200);
    await again.arrayBuffer();
    t.false(box.logs().some((l) => l.text.includes(TOKENS.contact) || l.text.includes("f".repeat(32))));
  },
);

run("a robot route's limit counts each request once, and a body too large does not escape it", async (t) => {
  // The tight deployment: one a second on the robot routes, no burst.
  await new Promise((r) => setTimeout(r, 1100));
  // A stranger's robot call passes the limit in the receiver's location, then is refused by its
  // address: the refusal location does not count it a second time (403, not 429).
  const before = await rejected("contact", "rate_limited");
  const stranger = await post(fromStranger, viaNginx(contactPath("4896"), tightPort), robot("4896"));
  t.is(stranger.status, 403);
  await stranger.arrayBuffer();
  // A body too large is refused before any location's limit_req; its refusal location meets the
  // robot route's limit instead: the allowed address's next call within the second is over it.
  const big = await post(fromAllowed, viaNginx(contactPath("4897"), tightPort), `a=${"x".repeat(9000)}`);
  t.is(big.status, 413);
  await big.arrayBuffer();
  const next = await post(fromAllowed, viaNginx(contactPath("4898"), tightPort), robot("4898"));
  t.is(next.status, 429);
  t.deepEqual(await next.json(), { error: "too_many_requests" });
  t.is(await rejected("contact", "rate_limited"), before + 1);
});
