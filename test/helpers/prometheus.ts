// Prometheus in tests: the rules and dashboard files of deploy/, Debian's promtool and prometheus
// binaries (apt-get install -y prometheus; tests that need them skip with a message when absent),
// and a real Prometheus run on loopback with its own data folder.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { projectRoot } from "../../src/local/project-root.js";

export const RULES_FILE = join(projectRoot, "deploy", "prometheus", "bitrix-sync.rules.yml");
export const RULES_TEST_FILE = join(projectRoot, "deploy", "prometheus", "bitrix-sync.rules.test.yml");
export const DASHBOARD_FILE = join(projectRoot, "deploy", "grafana", "bitrix-sync.dashboard.json");

export const hasPromtool = spawnSync("promtool", ["--version"]).status === 0;
export const hasPrometheus = spawnSync("prometheus", ["--version"]).status === 0;

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface RuleFile {
  groups: Array<{ name: string; rules: AlertRule[] }>;
}

export function loadRules(): RuleFile {
  return parse(readFileSync(RULES_FILE, "utf8")) as RuleFile;
}

export function alertRules(): AlertRule[] {
  return loadRules().groups.flatMap((g) => g.rules);
}

/** Every PromQL expression of the Grafana dashboard, with the title of its panel. */
export function dashboardExpressions(): Array<{ panel: string; expr: string }> {
  const d = JSON.parse(readFileSync(DASHBOARD_FILE, "utf8")) as {
    panels: Array<{ title: string; targets?: Array<{ expr?: string }> }>;
  };
  return d.panels.flatMap((p) =>
    (p.targets ?? [])
      .filter((x) => typeof x.expr === "string")
      .map((x) => ({ panel: p.title, expr: x.expr as string })),
  );
}

/**
 * The rules file with only its `for:` durations replaced (expressions, labels and annotations
 * untouched), for a test that cannot wait minutes.
 */
export function rulesWithFor(duration: string): string {
  const file = loadRules();
  for (const g of file.groups) for (const r of g.rules) if (r.for !== undefined) r.for = duration;
  return stringify(file);
}

/**
 * The named alert rules of the rules file as one group, each as the file has it but with its `for:`
 * (when it has one) replaced by `duration`: a test of those alerts only.
 */
export function rulesNamed(names: readonly string[], duration: string): string {
  const rules = alertRules().filter((r) => names.includes(r.alert));
  const missing = names.filter((n) => !rules.some((r) => r.alert === n));
  if (missing.length > 0) throw new Error(`not in the rules file: ${missing.join(", ")}`);
  for (const r of rules) if (r.for !== undefined) r.for = duration;
  return stringify({ groups: [{ name: "under-test", rules }] });
}

/** A free TCP port on loopback (the OS's choice). */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => resolve(typeof a === "object" && a ? a.port : 0));
    });
  });
}

export interface RunningPrometheus {
  url: string;
  output: string[];
  /** GET <url>/api/v1/<path>; the `data` of a success. */
  api<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts Debian's prometheus on loopback with its own temporary data folder, scraping `target`
 * (host:port; null for none) every `scrapeSec` (a second unless told) as job "bitrix-sync" and
 * evaluating `rules` (YAML text) every second.
 */
export async function startPrometheus(
  target: string | null,
  rules: string,
  /** More scrape jobs (e.g. the blackbox probe's), each scraped every second too. */
  extraScrapeConfigs: object[] = [],
  /**
   * Seconds between scrapes, and each scrape's timeout. A scrape of the service queries the
   * database; on a loaded machine it can outlast a second, and a scrape that times out leaves every
   * series absent, so no rule fires.
   */
  scrapeSec = 1,
): Promise<RunningPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-prometheus-"));
  writeFileSync(join(dir, "rules.yml"), rules);
  writeFileSync(
    join(dir, "prometheus.yml"),
    stringify({
      global: {
        scrape_interval: `${scrapeSec}s`,
        evaluation_interval: "1s",
        scrape_timeout: `${scrapeSec}s`,
      },
      rule_files: [join(dir, "rules.yml")],
      scrape_configs: [
        ...(target === null ? [] : [{ job_name: "bitrix-sync", static_configs: [{ targets: [target] }] }]),
        ...extraScrapeConfigs,
      ],
    }),
  );
  const port = await freePort();
  const child: ChildProcess = spawn(
    "prometheus",
    [
      `--config.file=${join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--storage.tsdb.retention.time=1h",
      "--log.level=warn",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const output: string[] = [];
  child.stdout?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  child.stderr?.on("data", (d: Buffer) => output.push(d.toString("utf8")));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const api = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${url}/api/v1/${path}`);
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== "success") throw new Error(`prometheus ${path}: ${body.error ?? res.status}`);
    return body.data;
  };
  const stop = async () => {
    if (child.exitCode === null) child.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready when its API answers.
  const end = Date.now() + 30_000;
  for (;;) {
    try {
      const res = await fetch(`${url}/-/ready`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || Date.now() > end) {
      await stop();
      throw new Error(`prometheus did not start: ${output.join("").slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, output, api, stop };
}

/** The promtool unit-test file: which alerts its cases evaluate. */
export function readRulesTest(): {
  rule_files: string[];
  tests: Array<{ alert_rule_test?: Array<{ alertname: string }> }>;
} {
  return parse(readFileSync(RULES_TEST_FILE, "utf8"));
}
