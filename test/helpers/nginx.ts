// A real nginx on loopback for the receiver tests, run the way a non-root user can: everything (pid,
// temp paths, logs, the startup error log) under one temporary prefix, no master process. The site
// file is rendered by the project's own `npm run render:nginx` command.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { projectRoot } from "../../src/local/project-root.js";

export const hasNginx = spawnSync("nginx", ["-v"]).status === 0;
export const hasOpenssl = spawnSync("openssl", ["version"]).status === 0;

export interface NginxSandbox {
  dir: string;
  cert: string;
  key: string;
  /** The text of every file in `dir` whose name ends in `.log`. */
  logs(): Array<{ file: string; text: string }>;
  remove(): void;
}

/**
 * A temporary prefix with a throw-away self-signed certificate for `localhost` (also as a subject
 * alternative name, which verifying clients such as Go's require), valid for `days`.
 */
export function nginxSandbox(opts: { days?: number } = {}): NginxSandbox {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-nginx-"));
  const cert = join(dir, "cert.pem");
  const key = join(dir, "key.pem");
  const r = spawnSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-days",
      String(opts.days ?? 1),
      "-subj",
      "/CN=localhost",
    ].concat(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert]),
    { stdio: "ignore" },
  );
  if (r.status !== 0) throw new Error("openssl could not make a test certificate");
  return {
    dir,
    cert,
    key,
    logs: () =>
      readdirSync(dir)
        .filter((f) => f.endsWith(".log"))
        .map((f) => ({ file: f, text: readFileSync(join(dir, f), "utf8") })),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Runs `npm run render:nginx`'s command with exactly `env` (plus PATH), and `args` after `--out`. */
export function renderNginxCli(env: Record<string, string>, out: string, args: readonly string[] = []) {
  return spawnSync(process.execPath, ["--import", "tsx", "scripts/render-nginx.ts", "--out", out, ...args], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH ?? "", ...env },
    encoding: "utf8",
  });
}

/** A main nginx.conf around `site`, every writable path under the sandbox. */
export function mainConfig(box: NginxSandbox, name: string, site: string): string {
  const main = join(box.dir, `${name}.nginx.conf`);
  const d = box.dir;
  writeFileSync(
    main,
    [
      "master_process off;",
      "daemon off;",
      `pid ${join(d, `${name}.pid`)};`,
      `error_log ${join(d, `${name}.main-error.log`)} warn;`,
      "events { worker_connections 64; }",
      "http {",
      `  client_body_temp_path ${d}/body; proxy_temp_path ${d}/proxy;`,
      `  fastcgi_temp_path ${d}/fcgi; uwsgi_temp_path ${d}/uwsgi; scgi_temp_path ${d}/scgi;`,
      `  include ${site};`,
      "}",
    ].join("\n"),
  );
  return main;
}

/**
 * `nginx -t` on a main config; `-e` keeps even the startup error log out of /var/log. `stderr`: a
 * file descriptor for nginx's standard error instead of a pipe to this process.
 */
export function nginxTest(box: NginxSandbox, main: string, stderr?: number) {
  return spawnSync("nginx", ["-t", "-e", join(box.dir, "startup-error.log"), "-p", box.dir, "-c", main], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", stderr ?? "pipe"],
  });
}

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/**
 * Starts nginx and waits until it accepts connections on 127.0.0.1:`port`. (A TCP connect, not an
 * HTTPS request: the rendered configuration refuses a TLS handshake that does not name its server.)
 */
export async function startNginx(box: NginxSandbox, main: string, port: number): Promise<ChildProcess> {
  const p = spawn("nginx", ["-e", join(box.dir, "startup-error.log"), "-p", box.dir, "-c", main], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  p.stderr?.on("data", (d) => {
    stderr += String(d);
  });
  for (let i = 0; i < 100; i++) {
    if (await listening(port)) return p;
    if (p.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  p.kill("SIGTERM");
  throw new Error(`nginx did not start: ${stderr}`);
}
