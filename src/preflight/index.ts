// `npm run preflight` (docs/deployment.md, "Preflight"): read-only checks of everything the service
// cannot confirm itself before sync is enabled (§12.2, §13, §16, §17). One line per check, or JSON;
// exit 0 all passed, 1 something failed, 2 something could not be checked.
import { readFileSync } from "node:fs";
import { checkConfiguration } from "./config.js";
import { checkDatabase } from "./database.js";
import { checkPortal } from "./portal.js";
import { checkProxy } from "./proxy.js";
import { type CheckResult, exitCode, notChecked } from "./types.js";

export * from "./types.js";

export interface PreflightReport {
  results: CheckResult[];
  exitCode: 0 | 1 | 2;
}

const DEPENDENT = [
  "database.reachable",
  "database.tls",
  "database.search_path",
  "database.migrations",
  "database.worker_schema",
  "database.owner",
  "database.grants",
  "database.settings",
  "database.cutover",
  "portal.credential",
  "portal.methods",
  "portal.contact_fields",
  "portal.alert_process",
  "portal.member_id",
  "portal.probe_date_modify",
  "portal.probe_registered_form",
  "portal.probe_opened_filter",
];

/** The owner's connection for reading the privilege drift: MIGRATION_DATABASE_URL or its file. */
function ownerUrl(raw: NodeJS.ProcessEnv): string | undefined {
  if (raw.MIGRATION_DATABASE_URL) return raw.MIGRATION_DATABASE_URL;
  if (raw.MIGRATION_DATABASE_URL_FILE) {
    try {
      return readFileSync(raw.MIGRATION_DATABASE_URL_FILE, "utf8").replace(/\r?\n$/, "") || undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Runs every check against the environment `raw` (the service's variables, as `npm start` reads them). */
export async function runPreflight(raw: NodeJS.ProcessEnv): Promise<PreflightReport> {
  const { config, results } = checkConfiguration(raw);
  if (config === null) {
    for (const id of DEPENDENT) {
      results.push(notChecked(id, "the configuration cannot be loaded (config.variables)"));
    }
  } else {
    const db = await checkDatabase(config, ownerUrl(raw));
    results.push(...db.results);
    results.push(...(await checkPortal(config, db.settings)));
  }
  results.push(...(await checkProxy(raw)));
  const report = { results, exitCode: exitCode(results) };
  return scrub(report, secretValues(raw, config?.secrets ?? {}));
}

/** Every secret value known to this run, longest first (so no shorter one leaves a tail). */
function secretValues(raw: NodeJS.ProcessEnv, secrets: Record<string, string | undefined>): string[] {
  const values = new Set<string>();
  for (const v of Object.values(secrets)) if (v && v.length >= 4) values.add(v);
  const owner = ownerUrl(raw);
  if (owner) values.add(owner);
  for (const v of [...values]) {
    // The pieces of a URL that carry a credential, on their own too: a password, and the webhook
    // code in a Bitrix24 webhook URL's path (/rest/<user>/<code>/).
    try {
      const u = new URL(v);
      if (u.password) values.add(decodeURIComponent(u.password));
      const code = /^\/rest\/\d+\/([^/]+)\/?$/.exec(u.pathname)?.[1];
      if (code && code.length >= 4) values.add(code);
    } catch {
      // not a URL
    }
  }
  return [...values].sort((a, b) => b.length - a.length);
}

/**
 * A last guard: no check puts a secret into its text, and if one ever did, it is cut out here. (The
 * tests grep the output for every secret regardless.)
 */
function scrub(report: PreflightReport, secrets: string[]): PreflightReport {
  const clean = (s: string) => secrets.reduce((acc, v) => acc.replaceAll(v, "[secret]"), s);
  return {
    exitCode: report.exitCode,
    results: report.results.map((r) => ({
      ...r,
      detail: clean(r.detail),
      ...(r.hint !== undefined ? { hint: clean(r.hint) } : {}),
    })),
  };
}

const LABEL: Record<CheckResult["status"], string> = {
  ok: "ok  ",
  warn: "warn",
  fail: "FAIL",
  unknown: "??  ",
};

/** One line per check: status, name, what was found, and what to do. */
export function formatReport(report: PreflightReport): string {
  const width = Math.max(...report.results.map((r) => r.id.length));
  const lines = report.results.map(
    (r) => `${LABEL[r.status]}  ${r.id.padEnd(width)}  ${r.detail}${r.hint ? ` -- hint: ${r.hint}` : ""}`,
  );
  const n = (s: CheckResult["status"]) => report.results.filter((r) => r.status === s).length;
  lines.push(
    `preflight: ${n("ok")} ok, ${n("warn")} warning(s), ${n("fail")} failed, ${n("unknown")} not checked; exit ${report.exitCode}`,
  );
  return `${lines.join("\n")}\n`;
}
