// Preflight, proxy (§12.2, §16): the allow-list is not empty while the receivers are enabled, and the
// public nginx configuration rendered from this environment passes `nginx -t`. Application readiness
// cannot see the proxy, so this is where both are checked.
import { execFile } from "node:child_process";
import { lookup } from "node:dns/promises";
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError } from "../config/env.js";
import { type NginxRender, renderNginx, renderNginxFromEnv } from "../config/nginx.js";
import { OPTIONAL_SECRET_NAMES, SECRET_NAMES } from "../config/secrets.js";
import { type CheckResult, check, notChecked } from "./types.js";

const ALLOW_LIST = "BITRIX_WEBHOOK_ALLOWED_CIDRS";

/**
 * Runs a program without blocking the event loop (the portal checks' HTTP calls may be in flight in
 * the same process). `status` null: it could not be started (e.g. not installed).
 */
function run(file: string, args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { encoding: "utf8", timeout: 60_000 }, (err, _stdout, stderr) => {
      if (!err) return resolve({ status: 0, stderr });
      const code = (err as NodeJS.ErrnoException & { code?: unknown }).code;
      resolve({ status: typeof code === "number" ? code : null, stderr: String(stderr ?? "") });
    });
  });
}

function render(
  raw: NodeJS.ProcessEnv,
): { ok: true; render: NginxRender } | { ok: false; problems: string[] } {
  try {
    return { ok: true, render: renderNginxFromEnv(raw) };
  } catch (e) {
    if (e instanceof ConfigError) return { ok: false, problems: e.problems.map((p) => p.text) };
    throw e;
  }
}

export async function checkProxy(raw: NodeJS.ProcessEnv): Promise<CheckResult[]> {
  const first = render(raw);
  const out: CheckResult[] = [];
  let rendered: NginxRender | null = null;
  if (first.ok) {
    rendered = first.render;
    const s = rendered.settings;
    out.push(
      check(
        "proxy.allow_list",
        "ok",
        rendered.receiversEnabledBy
          ? `${s.allowed.length} allowed network(s); receivers enabled (${rendered.receiversEnabledBy})`
          : `${s.allowed.length} allowed network(s); receivers off`,
      ),
    );
  } else {
    const allow = first.problems.filter((p) => p.startsWith(`${ALLOW_LIST}:`));
    const other = first.problems.filter((p) => !p.startsWith(`${ALLOW_LIST}:`));
    out.push(
      allow.length > 0
        ? check(
            "proxy.allow_list",
            "fail",
            allow.join("; "),
            "list the portal's source networks in BITRIX_WEBHOOK_ALLOWED_CIDRS, review, render again (docs/deployment.md)",
          )
        : other.length > 0
          ? notChecked("proxy.allow_list", "the nginx configuration cannot be rendered (proxy.nginx_config)")
          : check("proxy.allow_list", "ok", "allow-list valid"),
    );
    if (other.length > 0) {
      out.push(
        check(
          "proxy.nginx_config",
          "fail",
          `npm run render:nginx would refuse: ${other.join("; ")}`,
          "fix the variables named (docs/deployment.md, Public nginx)",
        ),
      );
      return out;
    }
    // Only the allow-list is wrong: check the rest of the configuration with the receivers counted
    // off, so its syntax is still tested (the list itself is reported above).
    const off: NodeJS.ProcessEnv = { ...raw, BITRIX_SYNC_ENABLED: "false", SECRETS_SOURCE: "env" };
    for (const n of [...SECRET_NAMES, ...OPTIONAL_SECRET_NAMES]) delete off[n];
    const second = render(off);
    if (!second.ok) {
      out.push(
        check(
          "proxy.nginx_config",
          "fail",
          `npm run render:nginx would refuse: ${second.problems.join("; ")}`,
        ),
      );
      return out;
    }
    rendered = second.render;
  }
  out.push(await nginxTest(rendered));
  return out;
}

function readable(path: string): boolean {
  try {
    accessSync(path, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * `nginx -t` on the rendered server block inside a minimal main configuration, everything writable
 * under a temporary folder. What this host lacks is replaced and said: the TLS pair (a throw-away
 * one), the log files (in the folder), an upstream name that does not resolve here (127.0.0.1).
 */
async function nginxTest(r: NginxRender): Promise<CheckResult> {
  const v = await run("nginx", ["-v"]);
  if (v.status !== 0) {
    return check(
      "proxy.nginx_config",
      "unknown",
      "nginx is not installed on this host, so the rendered configuration was not tested",
      "run preflight where nginx is installed, or `nginx -t` in the nginx container after rendering",
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-preflight-nginx-"));
  try {
    const notes: string[] = [];
    const s = { ...r.settings, accessLog: join(dir, "access.log"), errorLog: join(dir, "error.log") };
    if (!readable(s.certificate) || !readable(s.certificateKey)) {
      const cert = join(dir, "cert.pem");
      const key = join(dir, "key.pem");
      const o = await run("openssl", [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=preflight",
        "-keyout",
        key,
        "-out",
        cert,
      ]);
      if (o.status !== 0) {
        return check(
          "proxy.nginx_config",
          "unknown",
          "the TLS certificate is not readable here and openssl is missing to stand in for it",
          "run preflight where the certificate is, or install openssl",
        );
      }
      s.certificate = cert;
      s.certificateKey = key;
      notes.push("a throw-away certificate (the configured one is not readable here)");
    }
    const upstreamHost = s.upstream.slice(0, s.upstream.lastIndexOf(":")).replace(/^\[|\]$/g, "");
    try {
      await lookup(upstreamHost);
    } catch {
      s.upstream = `127.0.0.1${s.upstream.slice(s.upstream.lastIndexOf(":"))}`;
      notes.push(`upstream 127.0.0.1 (${upstreamHost} does not resolve here)`);
    }
    const site = join(dir, "site.conf");
    writeFileSync(site, renderNginx(s));
    const main = join(dir, "nginx.conf");
    writeFileSync(
      main,
      [
        "worker_processes 1;",
        `pid ${join(dir, "nginx.pid")};`,
        `error_log ${join(dir, "main-error.log")} warn;`,
        "events { worker_connections 64; }",
        "http {",
        `  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;`,
        `  fastcgi_temp_path ${dir}/fcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;`,
        `  include ${site};`,
        "}",
        "",
      ].join("\n"),
    );
    const t = await run("nginx", ["-t", "-q", "-e", join(dir, "startup-error.log"), "-p", dir, "-c", main]);
    const with_ = notes.length > 0 ? ` (tested with ${notes.join(", ")})` : "";
    if (t.status === 0) {
      return check("proxy.nginx_config", "ok", `the rendered configuration passes nginx -t${with_}`);
    }
    const emerg = `${t.stderr}`
      .split("\n")
      .filter((l) => /\[(emerg|alert|crit|error)\]/.test(l))
      .map((l) => l.replaceAll(dir, "<tmp>").trim())
      .slice(0, 3);
    return check(
      "proxy.nginx_config",
      "fail",
      `the rendered configuration fails nginx -t${with_}: ${emerg.join("; ") || "no message"}`,
      "fix the BITRIX_SYNC_NGINX_* setting nginx names (docs/deployment.md)",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
