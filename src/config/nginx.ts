// The public nginx server block (§10.1, §16), rendered from the same environment the service reads:
// the robots' allow-list is BITRIX_WEBHOOK_ALLOWED_CIDRS, validated by the service's own schema; the
// rest (listen, upstream, names, paths, limits) are BITRIX_SYNC_NGINX_* settings that only this
// renderer reads. `npm run render:nginx` (scripts/render-nginx.ts) writes the result.
import { isAbsolute } from "node:path";
import { z } from "zod";
import type { Cidr } from "./cidr.js";
import {
  EDGE_REASON_HEADER,
  EDGE_RECEIVER_HEADER,
  EDGE_REFUSAL_PATH,
  EDGE_REFUSALS,
} from "./edge-contract.js";
import { ConfigError, type Env, parseEnv } from "./env.js";
import { DEFAULT_MAX_BODY_BYTES } from "./receivers.js";
import { loadSecrets, SecretError } from "./secrets.js";

const HOST_NAME =
  /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i;
const PORT = "(?:[1-9]\\d{0,4})";
const LISTEN = new RegExp(`^(?:${PORT}|\\d{1,3}(?:\\.\\d{1,3}){3}:${PORT}|\\[[0-9a-f:.]+\\]:${PORT})$`, "i");
const UPSTREAM = new RegExp(`^(?:[a-z0-9.-]+|\\[[0-9a-f:.]+\\]):${PORT}$`, "i");
const HEALTH_LISTEN = new RegExp(`^(?:127(?:\\.\\d{1,3}){3}|\\[::1\\]):${PORT}$`);
// Nothing nginx would read as syntax or a variable: no space, quote, `;`, `{`, `}`, `$` or `#`.
const PATH = /^\/[A-Za-z0-9._/@+-]*$/;

const path = (what: string) =>
  z
    .string()
    .refine((s) => isAbsolute(s) && PATH.test(s), `${what}: an absolute path of letters, digits and ._/@+-`);
const count = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

/** The renderer's own settings. Defaults fit deploy/compose.yaml's nginx container. */
export const NginxEnvSchema = z.object({
  // Defaults to the host of BITRIX_SYNC_PUBLIC_BASE_URL.
  BITRIX_SYNC_NGINX_SERVER_NAME: z.string().regex(HOST_NAME, "must be a host name").optional(),
  BITRIX_SYNC_NGINX_LISTEN: z
    .string()
    .default("443,[::]:443")
    .transform((s) => s.split(",").map((x) => x.trim()))
    .refine((l) => l.every((x) => LISTEN.test(x)), "must be port, ipv4:port or [ipv6]:port, comma-separated"),
  BITRIX_SYNC_NGINX_UPSTREAM: z.string().regex(UPSTREAM, "must be host:port").default("bitrix-sync:8080"),
  BITRIX_SYNC_NGINX_TLS_CERTIFICATE: path("certificate").default("/etc/nginx/tls/bitrix-sync-public.crt"),
  BITRIX_SYNC_NGINX_TLS_CERTIFICATE_KEY: path("key").default("/etc/nginx/tls/bitrix-sync-public.key"),
  BITRIX_SYNC_NGINX_ACCESS_LOG: path("access log").default("/var/log/nginx/bitrix-sync-public.access.log"),
  BITRIX_SYNC_NGINX_ERROR_LOG: path("error log").default("/var/log/nginx/bitrix-sync-public.error.log"),
  // The service refuses bodies above DEFAULT_MAX_BODY_BYTES anyway; nginx may only be stricter.
  BITRIX_SYNC_NGINX_MAX_BODY_BYTES: count(512, DEFAULT_MAX_BODY_BYTES).default(DEFAULT_MAX_BODY_BYTES),
  // The robot routes' limit per source address, sized for Bitrix24's robots (docs/deployment.md).
  BITRIX_SYNC_NGINX_RATE_PER_SEC: count(1, 10_000).default(100),
  BITRIX_SYNC_NGINX_BURST: count(0, 100_000).default(500),
  // Every other route of the public server (no robot's request goes there): a much tighter limit
  // per source address (per minute).
  BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN: count(1, 600_000).default(30),
  BITRIX_SYNC_NGINX_OTHER_ROUTE_BURST: count(0, 100_000).default(10),
  // Strict-Transport-Security's max-age; 0 turns the header off (two years by default).
  BITRIX_SYNC_NGINX_HSTS_MAX_AGE_SEC: count(0, 63_072_000).default(63_072_000),
  // nginx's own health endpoint (GET /nginx-health, plain HTTP) for the container's healthcheck: on
  // loopback only, never on the public addresses.
  BITRIX_SYNC_NGINX_HEALTH_LISTEN: z
    .string()
    .default("127.0.0.1:8081")
    .refine(
      (l) => HEALTH_LISTEN.test(l),
      "must be a loopback address and port: 127.x.x.x:port or [::1]:port",
    ),
});

export interface NginxSettings {
  serverName: string;
  listen: string[];
  upstream: string;
  certificate: string;
  certificateKey: string;
  accessLog: string;
  errorLog: string;
  maxBodyBytes: number;
  /** The robot routes' limit per source address (per second), and its burst. */
  ratePerSec: number;
  burst: number;
  /** Every other route's limit per source address (per minute), and its burst. */
  otherRouteRatePerMin: number;
  otherRouteBurst: number;
  /** Strict-Transport-Security max-age in seconds; 0: no header. */
  hstsMaxAgeSec: number;
  /** nginx's own health listener (loopback address:port), for the container's healthcheck. */
  healthListen: string;
  /** The robots' source addresses; empty means every request is refused with 403. */
  allowed: readonly Cidr[];
}

export interface NginxRender {
  text: string;
  settings: NginxSettings;
  /** Why the receivers count as enabled (for the operator's message), or null. */
  receiversEnabledBy: string | null;
}

/**
 * Whether the receivers can accept anything: sync is enabled, or a receiver token is configured.
 * Only the presence of a token is looked at; no value is read into the output.
 */
function receiversEnabledBy(env: Env, raw: NodeJS.ProcessEnv): string | null {
  if (env.BITRIX_SYNC_ENABLED === true) return "BITRIX_SYNC_ENABLED=true";
  let secrets: ReturnType<typeof loadSecrets>;
  try {
    secrets = loadSecrets({ ...raw, SECRETS_SOURCE: env.SECRETS_SOURCE === "env" ? "env" : "file" });
  } catch (e) {
    // The host rendering the proxy's configuration may not hold the service's secrets: when they
    // cannot be looked at, count the receivers as enabled (an empty allow-list is then refused).
    if (e instanceof SecretError) return "the receiver tokens could not be checked on this host";
    throw e;
  }
  for (const name of ["BITRIX_SYNC_CONTACT_RECEIVER_TOKEN", "BITRIX_SYNC_ALERT_RECEIVER_TOKEN"] as const) {
    if (secrets[name] !== undefined) return `${name} is configured`;
  }
  return null;
}

/**
 * Settings of an earlier release whose meaning is gone: the tight limit was keyed on the absence of
 * a token, which any value of `token` escaped. Refused by name, so a reviewed environment that still
 * sets one is looked at again rather than silently rendered with the default.
 */
const RENAMED: ReadonlyArray<[string, string]> = [
  ["BITRIX_SYNC_NGINX_TOKENLESS_RATE_PER_MIN", "BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN"],
  ["BITRIX_SYNC_NGINX_TOKENLESS_BURST", "BITRIX_SYNC_NGINX_OTHER_ROUTE_BURST"],
];

/** The renderer's problems as one ConfigError; each text starts with the variable's name. */
function configError(problems: string[]): ConfigError {
  return new ConfigError(
    problems.map((text) => ({ variable: text.split(":")[0] ?? "", kind: "invalid" as const, text })),
  );
}

/**
 * Validates the environment with the service's schema plus the renderer's, and renders. Throws
 * ConfigError listing every problem, including an empty allow-list while the receivers are enabled
 * (§12.2, §16: a deployment error).
 */
export function renderNginxFromEnv(raw: NodeJS.ProcessEnv): NginxRender {
  const problems: string[] = [];
  let env: Env | undefined;
  try {
    env = parseEnv(raw);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    problems.push(...e.problems.map((p) => p.text));
  }
  const parsed = NginxEnvSchema.safeParse(raw);
  if (!parsed.success) {
    problems.push(...parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`));
  }
  if (env === undefined || !parsed.success) {
    throw configError(problems);
  }
  const n = parsed.data;
  const publicHost = env.BITRIX_SYNC_PUBLIC_BASE_URL ? new URL(env.BITRIX_SYNC_PUBLIC_BASE_URL) : undefined;
  if (publicHost && publicHost.protocol !== "https:") {
    problems.push("BITRIX_SYNC_PUBLIC_BASE_URL: the receivers are served over HTTPS only (§10.1)");
  }
  const serverName = n.BITRIX_SYNC_NGINX_SERVER_NAME ?? publicHost?.hostname;
  if (serverName === undefined) {
    problems.push("BITRIX_SYNC_NGINX_SERVER_NAME: required when BITRIX_SYNC_PUBLIC_BASE_URL is not set");
  } else if (publicHost && publicHost.hostname !== serverName.toLowerCase()) {
    problems.push("BITRIX_SYNC_NGINX_SERVER_NAME: differs from the host of BITRIX_SYNC_PUBLIC_BASE_URL");
  }
  if (n.BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN > n.BITRIX_SYNC_NGINX_RATE_PER_SEC * 60) {
    problems.push(
      "BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN: must not be looser than BITRIX_SYNC_NGINX_RATE_PER_SEC (per minute): no robot's request goes to another route",
    );
  }
  for (const [old, now] of RENAMED) {
    if (raw[old] !== undefined) {
      problems.push(
        `${old}: no longer read; the limit is chosen by the route, not by the token: set ${now} (every route but the two robot routes) instead`,
      );
    }
  }
  const allowed = env.BITRIX_WEBHOOK_ALLOWED_CIDRS;
  const enabledBy = receiversEnabledBy(env, raw);
  if (allowed.length === 0 && enabledBy !== null) {
    problems.push(
      `BITRIX_WEBHOOK_ALLOWED_CIDRS: empty while the receivers are enabled (${enabledBy}); list the portal's source networks (§16)`,
    );
  }
  if (problems.length > 0 || serverName === undefined) {
    throw configError(problems);
  }
  const settings: NginxSettings = {
    serverName: serverName.toLowerCase(),
    listen: n.BITRIX_SYNC_NGINX_LISTEN,
    upstream: n.BITRIX_SYNC_NGINX_UPSTREAM,
    certificate: n.BITRIX_SYNC_NGINX_TLS_CERTIFICATE,
    certificateKey: n.BITRIX_SYNC_NGINX_TLS_CERTIFICATE_KEY,
    accessLog: n.BITRIX_SYNC_NGINX_ACCESS_LOG,
    errorLog: n.BITRIX_SYNC_NGINX_ERROR_LOG,
    maxBodyBytes: n.BITRIX_SYNC_NGINX_MAX_BODY_BYTES,
    ratePerSec: n.BITRIX_SYNC_NGINX_RATE_PER_SEC,
    burst: n.BITRIX_SYNC_NGINX_BURST,
    otherRouteRatePerMin: n.BITRIX_SYNC_NGINX_OTHER_ROUTE_RATE_PER_MIN,
    otherRouteBurst: n.BITRIX_SYNC_NGINX_OTHER_ROUTE_BURST,
    hstsMaxAgeSec: n.BITRIX_SYNC_NGINX_HSTS_MAX_AGE_SEC,
    healthListen: n.BITRIX_SYNC_NGINX_HEALTH_LISTEN,
    allowed,
  };
  return { text: renderNginx(settings), settings, receiversEnabledBy: enabledBy };
}

const ROUTES = ["/bitrix/sync/webhook/contact", "/bitrix/sync/webhook/alert"] as const;

/** nginx's own refusals, with the app's generic JSON bodies (src/inbound/routes.ts). */
const ERROR_PAGES: Array<[string, number, string]> = [
  ["forbidden", 403, "forbidden"],
  ["not_found", 404, "not_found"],
  ["method_not_allowed", 405, "method_not_allowed"],
  ["payload_too_large", 413, "payload_too_large"],
  ["too_many_requests", 429, "too_many_requests"],
  ["unavailable", 503, "unavailable"],
];

/**
 * The refusals nginx hands to the service to be counted (src/inbound/edge.ts, EDGE_REFUSALS): the
 * status, the reason (a constant, or for 403 the variable that tells an address from a method) and
 * the generic page the client gets whatever the service answers.
 */
const FORWARDED: Array<{ status: number; reason: string; page: string }> = [
  { status: 403, reason: "$bitrix_sync_refusal_403", page: EDGE_REFUSALS.source_ip.error },
  { status: 404, reason: "not_found", page: EDGE_REFUSALS.not_found.error },
  { status: 413, reason: "body_too_large", page: EDGE_REFUSALS.body_too_large.error },
  { status: 429, reason: "rate_limited", page: EDGE_REFUSALS.rate_limited.error },
];
/** nginx's header names for the two (case does not matter in HTTP). */
const header = (h: string) => h.replace(/(^|-)([a-z])/g, (_, d: string, c: string) => d + c.toUpperCase());

/**
 * Statuses the refusal route may answer, each replaced by nginx's own page (never shown as is). In
 * the refusal locations that hold the route limits, 429 is the limit's own and goes to @refused_429
 * (the route answers 429 only for rate_limited, which is never handed to those).
 */
const INTERCEPTED = "400 403 404 413 429 500 502 503 504";

/** The robot routes' limit directive (per peer, sized for Bitrix24's bursts). */
const robotLimit = (s: NginxSettings) =>
  `limit_req zone=bitrix_sync_webhooks${s.burst > 0 ? ` burst=${s.burst} nodelay` : ""};`;

/** Every other route's limit directive (per peer, much tighter). */
const otherLimit = (s: NginxSettings) =>
  `limit_req zone=bitrix_sync_other_routes${s.otherRouteBurst > 0 ? ` burst=${s.otherRouteBurst} nodelay` : ""};`;

/** The file's header and what the rest refers to: the route and receiver maps, the allow-list as a
 * variable, the refusal reasons and the log format. */
function vocabulary(s: NginxSettings): string {
  const geoLines = s.allowed.map((c) => `  ${c.text} 1;\n`).join("");
  const receiverOf = (route: string) => route.slice(route.lastIndexOf("/") + 1);
  return `# Public nginx in front of bitrix-sync (spec §10.1, §16; docs/deployment.md, docs/receivers.md).
# RENDERED by \`npm run render:nginx\` from the service's environment (src/config/nginx.ts). Do not
# edit: change BITRIX_WEBHOOK_ALLOWED_CIDRS or a BITRIX_SYNC_NGINX_* setting, review, render again.
# Include it from the http {} context. Only the two robot receivers are exposed; health, status and
# metrics stay on the internal network.

# Normalised route and receiver: the log never holds the request URI, only one of these constants.
map $uri $bitrix_sync_route {
  default "other";
${ROUTES.map((r) => `  ${r} ${r};`).join("\n")}
}
map $uri $bitrix_sync_receiver {
  default "none";
${ROUTES.map((r) => `  ${r} ${receiverOf(r)};`).join("\n")}
}

# The allow-list again, as a variable, so a refusal can say why. Keyed on $remote_addr, the TCP
# peer (no realip module is used), exactly like the allow/deny rules below.
geo $bitrix_sync_peer_allowed {
  default 0;
${geoLines}}

# nginx's 403 is either a source outside the allow-list or, for an allowed one, a method other
# than POST on a receiver (limit_except).
map $bitrix_sync_peer_allowed $bitrix_sync_refusal_403 {
  0 source_ip;
  default method_not_allowed;
}

# Why the request was refused by nginx itself: the refusal locations below set
# $bitrix_sync_refusal (and hand it to the service, which counts it in
# bitrix_sync_webhook_rejected_total); the rest (400 and 414 before any location, the service
# unreachable behind a receiver) only by their status. Empty when the service answered the robot
# request (its own log and metrics say why).
map "$bitrix_sync_refusal:$status:$upstream_status" $bitrix_sync_reason {
  default "";
  "~^(?<bitrix_sync_refused>[a-z_]+):" $bitrix_sync_refused;
  "~^:400:-?$" bad_request;
  "~^:414:-?$" uri_too_long;
  "~^:50[24]:" upstream_unavailable;
}

# The receiver token travels in the query string: no field may be $request_uri, $request, $args or
# $query_string. The peer address stays for diagnostics and allow-list review (§10.1).
log_format bitrix_sync_public escape=json
  '{"time":"$time_iso8601","peer":"$remote_addr","method":"$request_method",'
  '"receiver":"$bitrix_sync_receiver","route":"$bitrix_sync_route","status":$status,'
  '"reason":"$bitrix_sync_reason","bytes":$body_bytes_sent,"request_time":$request_time,'
  '"upstream_status":"$upstream_status"}';

`;
}

/** The request rate limits, chosen by the route alone, and the two upstreams. */
function limits(s: NginxSettings): string {
  return `# Request rate per source address, chosen by the route alone: nothing the request carries (a token,
# valid or not, or none) changes which limit it meets, and nginx never reads the token. Each key is
# the peer's address on its own routes and empty (not counted) elsewhere.
#
# The two robot routes: Bitrix24 sends from a few addresses and may burst after a mass edit; a
# request refused here is lost (the robot does not retry) until reconciliation repairs it, so the
# limit is sized for the robots and guards the service, and the allow-list keeps strangers out. A
# request with a wrong token, or none, meets the same limit: nginx cannot tell it from a robot's.
map $bitrix_sync_receiver $bitrix_sync_robot_route_peer {
  none "";
  default $binary_remote_addr;
}
limit_req_zone $bitrix_sync_robot_route_peer zone=bitrix_sync_webhooks:1m rate=${s.ratePerSec}r/s;

# Every other route of this server (no robot's request goes there; the answer is 403 or 404): a much
# tighter limit, so a flood from one address, with a token or without, is soon refused with 429.
map $bitrix_sync_receiver $bitrix_sync_other_route_peer {
  none $binary_remote_addr;
  default "";
}
limit_req_zone $bitrix_sync_other_route_peer zone=bitrix_sync_other_routes:1m rate=${s.otherRouteRatePerMin}r/m;

upstream bitrix_sync_receivers {
  server ${s.upstream};
  keepalive 16;
  # Shorter than the service's own keep-alive timeout (src/http/server.ts), so nginx closes an idle
  # connection before the service does and never sends a robot's request on a closing one.
  keepalive_timeout 5s;
}

# The same service, for nginx's own refusals only (the refusal locations below): a few connections
# at most, so a flood of refused requests costs the service little; past them a refusal is still
# answered, only not counted (its line in the access log keeps it).
upstream bitrix_sync_refusals {
  server ${s.upstream} max_conns=8;
  keepalive 4;
  keepalive_timeout 5s;
}

`;
}

/** The default server (any other host name is dropped) and nginx's own health on loopback. */
function sideServers(s: NginxSettings): string {
  return `# The default server of the same addresses: a request for any other host name (a scanner that
# found the address, a stale DNS name) is dropped without an answer (444), and a TLS handshake
# naming another host, or none, is refused before any certificate is shown.
server {
${s.listen.map((l) => `  listen ${l} ssl default_server;`).join("\n")}
  server_name _;
  ssl_reject_handshake on;
  access_log ${s.accessLog} bitrix_sync_public;
  error_log ${s.errorLog} crit;
  return 444;
}

# nginx's own health, for the container's healthcheck (deploy/compose.yaml): plain HTTP on loopback
# only, answered by nginx itself (no upstream, no log). It says nginx runs with this configuration
# loaded; the public path is the synthetic probe's (deploy/prometheus/blackbox.yml).
server {
  listen ${s.healthListen};
  server_name _;
  access_log off;
  error_log ${s.errorLog} crit;
  location = /nginx-health {
    default_type text/plain;
    return 200 "ok\\n";
  }
  location / {
    return 404;
  }
}

`;
}

/** The public server's head: TLS, logs, request bounds and the allow-list. */
function publicServer(s: NginxSettings): string {
  // Each entry's own line, newline included, so an empty list leaves no blank line.
  const allowLines = s.allowed.map((c) => `  allow ${c.text};\n`).join("");
  return `server {
  # HTTPS only. There is deliberately no plain-HTTP server: a redirect would send the token twice.
${s.listen.map((l) => `  listen ${l} ssl;`).join("\n")}
  server_name ${s.serverName};

  ssl_certificate ${s.certificate};
  ssl_certificate_key ${s.certificateKey};
  ssl_protocols TLSv1.2 TLSv1.3;
${
  s.hstsMaxAgeSec > 0
    ? `  # Clients that once reached this host never try it over plain HTTP again (there is no such server).
  add_header Strict-Transport-Security "max-age=${s.hstsMaxAgeSec}" always;
`
    : ""
}
  server_tokens off;
  access_log ${s.accessLog} bitrix_sync_public;
  # nginx's error messages quote the request line, query string included, at "error" level and
  # below (upstream failures, limit_req). Only crit and worse reach this log; the access log's
  # status, reason and upstream_status tell the rest.
  error_log ${s.errorLog} crit;

  # Bounded request: the robot's body is ~300 bytes; the request line holds the path, token and ID
  # (a longer one is answered 414).
  client_max_body_size ${s.maxBodyBytes};
  client_body_buffer_size ${s.maxBodyBytes};
  client_header_buffer_size 1k;
  large_client_header_buffers 4 2k;
  client_body_timeout 10s;
  client_header_timeout 10s;

  # Source allow-list (BITRIX_WEBHOOK_ALLOWED_CIDRS), checked against the TCP peer ($remote_addr).
  # An X-Forwarded-For from the client is never trusted; a proxy in front of this nginx needs its
  # own deployment review (§10.1). Changed only through review, never automatically.
${allowLines}  deny all;

  # A request over its route's limit is answered 429 (never nginx's default 503), and counted.
  limit_req_status 429;
`;
}

/** One exact location per robot receiver, proxied to the service. */
function receiverLocations(s: NginxSettings): string {
  return `${ROUTES.map(
    (r) => `
  # Exact route: no trailing-slash variant, no prefix match, hence no redirect.
  location = ${r} {
    limit_except POST {
      deny all;
    }
    ${robotLimit(s)}

    # No URI part: the request URI, with its query, is passed through unchanged.
    proxy_pass http://bitrix_sync_receivers;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host $host;
    # The robot's address for webhook_inbox.source_ip, overwriting whatever the client sent. The
    # service believes it only from BITRIX_SYNC_TRUSTED_PROXY_CIDRS (src/inbound/client-address.ts).
    proxy_set_header X-Real-IP $remote_addr;
    proxy_set_header X-Forwarded-For "";
    proxy_redirect off;
    proxy_connect_timeout 2s;
    proxy_send_timeout 10s;
    proxy_read_timeout 10s;
    proxy_buffering on;
  }`,
  ).join("\n")}
`;
}

/** Everything else, and nginx's own refusals handed to the service; the server's end. */
function refusalLocations(s: NginxSettings): string {
  return `
  # Everything else (health, status, metrics, any probe) does not exist here. A source outside the
  # allow-list is refused by its address on every path (\`return\` comes before allow/deny), so the
  # synthetic probe from outside sees the same refusal a stranger robot would. \`return\` also comes
  # before any limit_req: this route meets its limit in the refusal location it is handed to.
  location / {
    if ($bitrix_sync_peer_allowed = 0) {
      return 403;
    }
    return 404;
  }

  # nginx's own refusals are counted by the service: each goes to a refusal location that hands
  # the service the reason, the receiver route and the peer's address (no request line, query,
  # header or body: proxy_pass_request_headers and _body off), and the client gets nginx's own page
  # with the refusal's status whatever the service answers or if it does not (proxy_intercept_errors;
  # recursive_error_pages lets those pages follow the first redirect). 405, 414 and 400 are not
  # counted: the first never happens on these locations, the other two before a location exists.
  # The refusal locations hold the route limits too: nginx counts a request against limit_req once,
  # in the first location that has one, so a robot route's request limited in its own location is
  # not counted twice, while a request that got no further (\`return\` on another route, a body too
  # large on any) meets its route's limit here, before the service is called. Over it: 429,
  # counted as rate_limited.
  recursive_error_pages on;
${FORWARDED.map((f) => `  error_page ${f.status} @refused_${f.status};`).join("\n")}
  error_page 405 @method_not_allowed;
  error_page 500 502 503 504 @unavailable;
${FORWARDED.map(
  (f) => `
  location @refused_${f.status} {
    allow all;
    set $bitrix_sync_refusal ${f.reason};
    set $bitrix_sync_refusal_path ${EDGE_REFUSAL_PATH};${
      f.status === 429
        ? ""
        : `
    ${robotLimit(s)}
    ${otherLimit(s)}`
    }
    proxy_pass http://bitrix_sync_refusals$bitrix_sync_refusal_path;
    proxy_method POST;
    proxy_pass_request_headers off;
    proxy_pass_request_body off;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Content-Length "";
    proxy_set_header ${header(EDGE_REASON_HEADER)} $bitrix_sync_refusal;
    proxy_set_header ${header(EDGE_RECEIVER_HEADER)} $bitrix_sync_receiver;
    proxy_set_header X-Real-IP $remote_addr;
    proxy_connect_timeout 1s;
    proxy_send_timeout 2s;
    proxy_read_timeout 2s;
    proxy_intercept_errors on;${
      f.status === 429
        ? `
    error_page ${INTERCEPTED} =${f.status} @${f.page};`
        : `
    error_page 429 @refused_429;
    error_page ${INTERCEPTED.replace(" 429", "")} =${f.status} @${f.page};`
    }
  }`,
).join("")}
${ERROR_PAGES.map(
  ([name, code, body]) => `
  location @${name} {
    allow all;
    default_type application/json;
    return ${code} '{"error":"${body}"}';
  }`,
).join("")}
}
`;
}

/** The server block for the http {} context. Pure: the same settings give the same text. */
export function renderNginx(s: NginxSettings): string {
  return [vocabulary, limits, sideServers, publicServer, receiverLocations, refusalLocations]
    .map((section) => section(s))
    .join("");
}
