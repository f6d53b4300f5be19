// The Prometheus blackbox exporter in tests: Debian's prometheus-blackbox-exporter (apt-get install -y
// prometheus-blackbox-exporter; tests that need it skip with a message when it is absent), run on a
// free loopback port with the module file of deploy/prometheus/ plus what a test adds (its own CA).
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { projectRoot } from "../../src/local/project-root.js";
import { freePort } from "./prometheus.js";

export const BLACKBOX_FILE = join(projectRoot, "deploy", "prometheus", "blackbox.yml");
export const PROMETHEUS_FILE = join(projectRoot, "deploy", "prometheus", "prometheus.yml");

/** The binary: Debian names it prometheus-blackbox-exporter, upstream blackbox_exporter. */
export const BLACKBOX_BIN = ["prometheus-blackbox-exporter", "blackbox_exporter"].find(
  (b) => spawnSync(b, ["--version"]).status === 0,
);
export const hasBlackbox = BLACKBOX_BIN !== undefined;

interface Module {
  prober: string;
  timeout?: string;
  http?: Record<string, unknown>;
  tcp?: Record<string, unknown>;
}

/** The module file of deploy/prometheus/blackbox.yml. */
export function blackboxModules(): { modules: Record<string, Module> } {
  return parse(readFileSync(BLACKBOX_FILE, "utf8"));
}

export interface RunningBlackbox {
  /** host:port, the address Prometheus scrapes. */
  address: string;
  /** GET /probe for `module` and `target`: every sample by name (labels dropped). */
  probe(module: string, target: string): Promise<Map<string, number>>;
  stop(): Promise<void>;
}

/** Starts the exporter with `config` (YAML text) on a free loopback port; waits until it answers. */
export async function startBlackbox(config: string): Promise<RunningBlackbox> {
  if (!BLACKBOX_BIN) throw new Error("no blackbox exporter installed");
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-blackbox-"));
  const file = join(dir, "blackbox.yml");
  writeFileSync(file, config);
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    BLACKBOX_BIN,
    [`--config.file=${file}`, `--web.listen-address=${address}`, "--log.level=warn"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const output: string[] = [];
  child.stdout?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  child.stderr?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode === null) child.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const end = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await fetch(`http://${address}/-/healthy`)).ok) break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || Date.now() > end) {
      await stop();
      throw new Error(`the blackbox exporter did not start: ${output.join("").slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    address,
    async probe(module, target) {
      const url = `http://${address}/probe?module=${encodeURIComponent(module)}&target=${encodeURIComponent(target)}`;
      const text = await (await fetch(url)).text();
      const out = new Map<string, number>();
      for (const line of text.split("\n")) {
        const m = /^([a-z_:][a-z0-9_:]*)(?:\{[^}]*\})? (\S+)$/i.exec(line);
        if (m) out.set(m[1] as string, Number(m[2]));
      }
      return out;
    },
    stop,
  };
}

/**
 * The module file with `add` merged into the options of each module named in `modules` (its prober's
 * section: http, or tcp), e.g. a test CA in `tls_config`.
 */
export function blackboxConfigWith(
  modules: string | readonly string[],
  add: Record<string, unknown>,
): string {
  const file = blackboxModules();
  for (const module of typeof modules === "string" ? [modules] : modules) {
    const m = file.modules[module];
    if (!m) throw new Error(`no module ${module} in ${BLACKBOX_FILE}`);
    const key = m.prober === "tcp" ? "tcp" : "http";
    m[key] = { ...(m[key] ?? {}), ...add };
  }
  return stringify(file);
}
