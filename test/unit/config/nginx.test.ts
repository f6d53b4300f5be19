// The nginx renderer (src/config/nginx.ts): validation through the service's schema plus its own,
// the empty allow-list rule of §16, and the shape of what it writes. nginx itself runs in
// test/integration/inbound/nginx.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { EDGE_REFUSAL_PATH } from "../../../src/config/edge-contract.js";
import { ConfigError } from "../../../src/config/env.js";
import { renderNginxFromEnv } from "../../../src/config/nginx.js";

// Secrets from an empty environment unless a test adds them: the receivers are off.
const base = {
  SECRETS_SOURCE: "env",
  BITRIX_SYNC_NGINX_SERVER_NAME: "sync.example.invalid",
  BITRIX_WEBHOOK_ALLOWED_CIDRS: "203.0.113.0/24,2001:db8:b24::/48",
} as NodeJS.ProcessEnv;

function problems(env: NodeJS.ProcessEnv): string {
  try {
    renderNginxFromEnv(env);
  } catch (e) {
    if (e instanceof ConfigError) return e.message;
    throw e;
  }
  return "";
}

test("each allowed network becomes an allow rule and a geo entry; everything else is denied", (t) => {
  const { text, settings } = renderNginxFromEnv(base);
  t.is(settings.allowed.length, 2);
  for (const c of ["203.0.113.0/24", "2001:db8:b24::/48"]) {
    t.true(text.includes(`  allow ${c};\n`), c);
    t.true(text.includes(`  ${c} 1;\n`), c);
  }
  t.regex(text, /allow 2001:db8:b24::\/48;\n {2}deny all;/);
  t.regex(text, /listen 443 ssl;\n {2}listen \[::\]:443 ssl;/);
  t.true(text.includes("server bitrix-sync:8080;"));
  t.true(text.includes("client_max_body_size 8192;"));
  t.true(text.includes("rate=100r/s"));
  t.true(text.includes("burst=500 nodelay"));
  t.true(text.includes("proxy_set_header X-Real-IP $remote_addr;"));
  t.true(text.includes("location = /bitrix/sync/webhook/contact {"));
  t.true(text.includes("location = /bitrix/sync/webhook/alert {"));
  t.is(renderNginxFromEnv(base).text, text, "the same configuration renders the same text");
});

test("nothing that could carry the query string is logged or forwarded by a directive", (t) => {
  const code = renderNginxFromEnv(base).text.replace(/#.*$/gm, "");
  // Not even the token's presence: no argument of the query is read anywhere.
  t.notRegex(code, /\$request_uri|\$args|\$arg_|\$query_string|\$request\b|\$is_args/);
  t.notRegex(code, /\brewrite\b|return 30\d|\bredirect\b/);
  // The only paths named: the receivers, nginx's own loopback health, and the service's internal
  // refusal route, which nginx's refusal locations alone reach (never a client's request).
  t.deepEqual(
    [...new Set(code.match(/\/health\S*|\/metrics\S*|\/internal\S*|\/nginx-health\S*/g))],
    ["/nginx-health", `${EDGE_REFUSAL_PATH};`],
  );
});

test("nginx's refusals go to the service's refusal route with the reason, the receiver and the peer only", (t) => {
  const { text } = renderNginxFromEnv(base);
  for (const [status, reason, page] of [
    [403, "$bitrix_sync_refusal_403", "forbidden"],
    [404, "not_found", "not_found"],
    [413, "body_too_large", "payload_too_large"],
    [429, "rate_limited", "too_many_requests"],
  ] as const) {
    t.true(text.includes(`  error_page ${status} @refused_${status};\n`), String(status));
    const from = text.indexOf(`location @refused_${status} {`);
    const loc = text.slice(from, text.indexOf("\n  }", from));
    t.true(loc.includes(`set $bitrix_sync_refusal ${reason};`), loc);
    // Nothing of the request travels: no header, no body, no URI (the path is a constant).
    t.regex(loc, /proxy_pass_request_headers off;/);
    t.regex(loc, /proxy_pass_request_body off;/);
    t.regex(loc, /proxy_set_header Content-Length "";/);
    t.regex(loc, /proxy_pass http:\/\/bitrix_sync_refusals\$bitrix_sync_refusal_path;/);
    t.deepEqual(loc.match(/proxy_set_header X-\S+ \S+;/g), [
      "proxy_set_header X-Bitrix-Sync-Refusal $bitrix_sync_refusal;",
      "proxy_set_header X-Bitrix-Sync-Receiver $bitrix_sync_receiver;",
      "proxy_set_header X-Real-IP $remote_addr;",
    ]);
    // The client gets nginx's own page with the refusal's status, whatever the service answers.
    t.regex(loc, /proxy_intercept_errors on;/);
    if (status === 429) {
      t.true(loc.includes(`error_page 400 403 404 413 429 500 502 503 504 =429 @${page};`), loc);
      t.notRegex(loc, /limit_req/, "already limited: nginx counts a request once");
    } else {
      // The route's limit before the service is called; over it, the refusal is the limit's.
      t.true(loc.includes(`error_page 429 @refused_429;\n`), loc);
      t.true(loc.includes(`error_page 400 403 404 413 500 502 503 504 =${status} @${page};`), loc);
      t.regex(loc, /limit_req zone=bitrix_sync_webhooks burst=500 nodelay;/);
      t.regex(loc, /limit_req zone=bitrix_sync_other_routes burst=10 nodelay;/);
    }
  }
  t.regex(
    text,
    /map \$bitrix_sync_peer_allowed \$bitrix_sync_refusal_403 \{\n {2}0 source_ip;\n {2}default method_not_allowed;\n\}/,
  );
  t.regex(text, /recursive_error_pages on;/);
  t.regex(text, /upstream bitrix_sync_refusals \{\n {2}server bitrix-sync:8080 max_conns=8;/);
  // Outside the allow-list every path is refused by address, inside it an unknown path is 404.
  t.regex(
    text,
    /location \/ \{\n {4}if \(\$bitrix_sync_peer_allowed = 0\) \{\n {6}return 403;\n {4}\}\n {4}return 404;\n {2}\}/,
  );
});

test("nginx answers its own health on a loopback listener only", (t) => {
  const { text, settings } = renderNginxFromEnv(base);
  t.is(settings.healthListen, "127.0.0.1:8081");
  const from = text.indexOf("listen 127.0.0.1:8081;");
  const server = text.slice(from, text.indexOf("\n}\n", from));
  t.regex(server, /location = \/nginx-health \{\n {4}default_type text\/plain;\n {4}return 200 "ok\\n";/);
  t.regex(server, /access_log off;/);
  t.notRegex(server, /proxy_pass|ssl/);
  t.is(
    renderNginxFromEnv({ ...base, BITRIX_SYNC_NGINX_HEALTH_LISTEN: "[::1]:9000" }).settings.healthListen,
    "[::1]:9000",
  );
  for (const bad of ["0.0.0.0:8081", "8081", "10.0.0.1:8081", "127.0.0.1:8081; include x"]) {
    t.regex(
      problems({ ...base, BITRIX_SYNC_NGINX_HEALTH_LISTEN: bad }),
      /BITRIX_SYNC_NGINX_HEALTH_LISTEN: must be a loopback/,
      bad,
    );
  }
});

test("an empty allow-list is refused while the receivers are enabled, by sync or by a token", (t) => {
  const empty = { ...base, BITRIX_WEBHOOK_ALLOWED_CIDRS: "" };
  t.regex(
    problems({ ...empty, BITRIX_SYNC_ENABLED: "true" }),
    /empty while the receivers are enabled \(BITRIX_SYNC_ENABLED=true\)/,
  );
  t.regex(
    problems({ ...empty, BITRIX_SYNC_ALERT_RECEIVER_TOKEN: "tok-4f1c" }),
    /BITRIX_SYNC_ALERT_RECEIVER_TOKEN is configured/,
  );
  t.false(problems({ ...empty, BITRIX_SYNC_ALERT_RECEIVER_TOKEN: "tok-4f1c" }).includes("tok-4f1c"));
  // A token file in the secrets directory counts too.
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-secrets-"));
  try {
    writeFileSync(join(dir, "BITRIX_SYNC_CONTACT_RECEIVER_TOKEN"), "tok-9e2d\n");
    t.regex(
      problems({ ...empty, SECRETS_SOURCE: "file", BITRIX_SYNC_SECRETS_DIR: dir }),
      /BITRIX_SYNC_CONTACT_RECEIVER_TOKEN is configured/,
    );
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("with the receivers off an empty allow-list renders a server that refuses everyone", (t) => {
  const r = renderNginxFromEnv({ ...base, BITRIX_WEBHOOK_ALLOWED_CIDRS: "", BITRIX_SYNC_ENABLED: "false" });
  t.is(r.receiversEnabledBy, null);
  t.notRegex(r.text, /^\s*allow (?!all)/m);
  t.regex(r.text, /geo \$bitrix_sync_peer_allowed \{\n {2}default 0;\n\}/);
  t.regex(r.text, /\n {2}deny all;/);
});

test("the server name comes from BITRIX_SYNC_PUBLIC_BASE_URL and must agree with it", (t) => {
  const noName = { ...base, BITRIX_SYNC_NGINX_SERVER_NAME: undefined };
  t.is(
    renderNginxFromEnv({ ...noName, BITRIX_SYNC_PUBLIC_BASE_URL: "https://Sync.Example.invalid" }).settings
      .serverName,
    "sync.example.invalid",
  );
  t.regex(problems(noName), /BITRIX_SYNC_NGINX_SERVER_NAME: required/);
  t.regex(problems({ ...base, BITRIX_SYNC_PUBLIC_BASE_URL: "https://other.example.invalid" }), /differs/);
  t.regex(problems({ ...base, BITRIX_SYNC_PUBLIC_BASE_URL: "http://sync.example.invalid" }), /HTTPS only/);
});

test("values nginx would read as syntax are refused, and so are the service's own invalid variables", (t) => {
  const m = problems({
    ...base,
    BITRIX_SYNC_NGINX_LISTEN: "443; include /etc/passwd",
    BITRIX_SYNC_NGINX_UPSTREAM: "bitrix-sync",
    BITRIX_SYNC_NGINX_ACCESS_LOG: "/var/log/a b.log",
    BITRIX_SYNC_NGINX_ERROR_LOG: "relative.log",
    BITRIX_SYNC_NGINX_TLS_CERTIFICATE: "/etc/$host.crt",
    BITRIX_SYNC_NGINX_MAX_BODY_BYTES: "65536",
    BITRIX_SYNC_NGINX_SERVER_NAME: "sync.example.invalid;",
    BITRIX_WEBHOOK_ALLOWED_CIDRS: "10.0.0.1/8",
    BITRIX_SYNC_DB_POOL_SIZE: "1",
  });
  for (const name of [
    "BITRIX_SYNC_NGINX_LISTEN",
    "BITRIX_SYNC_NGINX_UPSTREAM",
    "BITRIX_SYNC_NGINX_ACCESS_LOG",
    "BITRIX_SYNC_NGINX_ERROR_LOG",
    "BITRIX_SYNC_NGINX_TLS_CERTIFICATE",
    "BITRIX_SYNC_NGINX_MAX_BODY_BYTES",
    "BITRIX_SYNC_NGINX_SERVER_NAME",
    "BITRIX_WEBHOOK_ALLOWED_CIDRS",
    "BITRIX_SYNC_DB_POOL_SIZE",
  ]) {
    t.true(m.includes(`${name}:`), name);
  }
});

test("a burst of 0 renders no burst clause (nginx refuses burst=0)", (t) => {
  const { text } = renderNginxFromEnv({
    ...base,
    BITRIX_SYNC_NGINX_BURST: "0",
    BITRIX_SYNC_NGINX_OTHER_ROUTE_BURST: "0",
  });
  t.regex(text, /limit_req zone=bitrix_sync_webhooks;/);
  t.regex(text, /limit_req zone=bitrix_sync_other_routes;/);
  t.notRegex(text, /burst=/);
});

test("on a host without the service's secrets folder the receivers count as enabled: a list renders, an empty one is refused", (t) => {
  const away = {
    ...base,
    SECRETS_SOURCE: "file",
    BITRIX_SYNC_SECRETS_DIR: join(tmpdir(), "bitrix-sync-no-such-dir"),
  };
  t.is(renderNginxFromEnv(away).receiversEnabledBy, "the receiver tokens could not be checked on this host");
  t.regex(
    problems({ ...away, BITRIX_WEBHOOK_ALLOWED_CIDRS: "" }),
    /empty while the receivers are enabled \(the receiver tokens could not be checked on this host\)/,
  );
});

test("a default server drops other host names; the named one sends HSTS", (t) => {
  const { text } = renderNginxFromEnv(base);
  const servers = text.split(/^server \{$/m).slice(1);
  t.is(servers.length, 3);
  const [fallback, , named] = servers as [string, string, string];
  t.regex(fallback, /listen 443 ssl default_server;\n {2}listen \[::\]:443 ssl default_server;/);
  t.regex(fallback, /server_name _;/);
  t.regex(fallback, /ssl_reject_handshake on;/);
  t.regex(fallback, /return 444;/);
  t.notRegex(fallback, /proxy_pass|ssl_certificate/);
  t.regex(named, /server_name sync\.example\.invalid;/);
  t.regex(named, /add_header Strict-Transport-Security "max-age=63072000" always;/);
  t.notRegex(
    renderNginxFromEnv({ ...base, BITRIX_SYNC_NGINX_HSTS_MAX_AGE_SEC: "0" }).text,
    /Strict-Transport-Security/,
  );
});

test("the route chooses the limit: the robot routes their own, every other route a tighter one", (t) => {
  const { text } = renderNginxFromEnv(base);
  // Each zone is keyed on the peer for its own routes only, by the receiver map (none: not a robot's).
  t.regex(
    text,
    /map \$bitrix_sync_receiver \$bitrix_sync_robot_route_peer \{\n {2}none "";\n {2}default \$binary_remote_addr;\n\}\nlimit_req_zone \$bitrix_sync_robot_route_peer zone=bitrix_sync_webhooks:1m rate=100r\/s;\n/,
  );
  t.regex(
    text,
    /map \$bitrix_sync_receiver \$bitrix_sync_other_route_peer \{\n {2}none \$binary_remote_addr;\n {2}default "";\n\}\nlimit_req_zone \$bitrix_sync_other_route_peer zone=bitrix_sync_other_routes:1m rate=30r\/m;\n/,
  );
  t.deepEqual(text.match(/limit_req_zone .*/g)?.length, 2);
  for (const receiver of ["contact", "alert"]) {
    const from = text.indexOf(`location = /bitrix/sync/webhook/${receiver} {`);
    const location = text.slice(from, text.indexOf("\n  }", from));
    t.deepEqual(location.match(/limit_req\b.*/g), ["limit_req zone=bitrix_sync_webhooks burst=500 nodelay;"]);
  }
  // One status for every limit, at the server's level: 429, handed on as rate_limited.
  t.deepEqual(text.match(/limit_req_status.*/g), ["limit_req_status 429;"]);
  t.regex(text, /\n {2}limit_req_status 429;\n/);
  t.regex(
    problems({
      ...base,
      BITRIX_SYNC_NGINX_RATE_PER_SEC: "1",
      BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN: "61",
    }),
    /BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN: must not be looser than BITRIX_SYNC_NGINX_RATE_PER_SEC/,
  );
  t.regex(
    renderNginxFromEnv({ ...base, BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN: "12" }).text,
    /zone=bitrix_sync_other_routes:1m rate=12r\/m;/,
  );
});

test("the earlier token-keyed settings are refused by name, pointing to the route's", (t) => {
  const m = problems({
    ...base,
    BITRIX_SYNC_NGINX_TOKENLESS_RATE_PER_MIN: "30",
    BITRIX_SYNC_NGINX_TOKENLESS_BURST: "10",
  });
  t.regex(
    m,
    /BITRIX_SYNC_NGINX_TOKENLESS_RATE_PER_MIN: no longer read; .* set BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN/,
  );
  t.regex(m, /BITRIX_SYNC_NGINX_TOKENLESS_BURST: no longer read; .* set BITRIX_SYNC_NGINX_OTHER_ROUTE_BURST/);
});

test("an allow-list entry wider than /8 or /32 is refused with the variable's name", (t) => {
  t.regex(
    problems({ ...base, BITRIX_WEBHOOK_ALLOWED_CIDRS: "203.0.113.0/24,0.0.0.0/0" }),
    /BITRIX_WEBHOOK_ALLOWED_CIDRS: "0\.0\.0\.0\/0" is wider than \/8, the widest IPv4 network a list may hold: list the portal's own networks/,
  );
  t.regex(
    problems({ ...base, BITRIX_WEBHOOK_ALLOWED_CIDRS: "2000::/3" }),
    /BITRIX_WEBHOOK_ALLOWED_CIDRS: "2000::\/3" is wider than \/32/,
  );
  // The trusted proxies may be a private range of any size.
  t.is(problems({ ...base, BITRIX_SYNC_TRUSTED_PROXY_CIDRS: "10.0.0.0/8,fd00::/8" }), "");
});
