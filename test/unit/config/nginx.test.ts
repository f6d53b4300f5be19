// The nginx renderer (src/config/nginx.ts): validation through the service's schema plus its own,
// the empty allow-list rule of §16, and the shape of what it writes. nginx itself runs in
// test/integration/inbound/nginx.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
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
  t.notRegex(code, /\$request_uri|\$args|\$arg_|\$query_string|\$request\b|\$is_args/);
  t.notRegex(code, /\brewrite\b|return 30\d|\bredirect\b/);
  t.notRegex(code, /\/health|\/metrics|\/internal/);
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
  const { text } = renderNginxFromEnv({ ...base, BITRIX_SYNC_NGINX_BURST: "0" });
  t.regex(text, /limit_req zone=bitrix_sync_webhooks;/);
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
