// `npm run preflight` (docs/deployment.md, "Preflight"): read-only checks of everything the service
// cannot confirm itself before sync is enabled (§12.2, §13, §16, §17). One line per check, or JSON;
// exit 0 all passed, 1 something failed, 2 something could not be checked. With `write` (the
// command line's --write) the contract probe follows (./probe.ts): the only part that writes.
import { readFileSync } from "node:fs";
import { checkConfiguration } from "./config.js";
import { checkDatabase } from "./database.js";
import { checkPortal } from "./portal.js";
import { PROBE_IDS, type ProbeOptions, runWriteProbe } from "./probe.js";
import { checkProxy } from "./proxy.js";
import { type CheckResult, exitCode, notChecked } from "./types.js";

export { DEFAULT_PROBE_NAME, PROBE_IDS, type ProbeOptions, probeOptionsProblem } from "./probe.js";
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
  "portal.contact_workflow",
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

/** Checks the probe needs passed: without them it would test the wrong thing or could not record. */
const PROBE_NEEDS = [
  "database.reachable",
  "database.migrations",
  "database.settings",
  "portal.credential",
  "portal.methods",
  "portal.contact_fields",
];

/**
 * Runs every check against the environment `raw` (the service's variables, as `npm start` reads
 * them). `write`: also run the contract probe, which creates and deletes throw-away Contacts.
 */
export async function runPreflight(
  raw: NodeJS.ProcessEnv,
  opts: { write?: ProbeOptions } = {},
): Promise<PreflightReport> {
  const { config, results } = checkConfiguration(raw);
  if (config === null) {
    for (const id of [...DEPENDENT, ...(opts.write ? PROBE_IDS : [])]) {
      results.push(notChecked(id, "the configuration cannot be loaded (config.variables)"));
    }
  } else {
    const db = await checkDatabase(config, ownerUrl(raw));
    results.push(...db.results);
    results.push(...(await checkPortal(config, db.settings)));
    if (opts.write) {
      const blocked = results.filter(
        (r) => PROBE_NEEDS.includes(r.id) && (r.status === "fail" || r.status === "unknown"),
      );
      const url = config.secrets.BITRIX_SYNC_DATABASE_URL;
      if (config.sandbox || url === undefined) {
        for (const id of PROBE_IDS)
          results.push(
            notChecked(id, "no portal and database are configured (sandbox mode): nothing to probe"),
          );
      } else if (blocked.length > 0 || db.settings === null) {
        const why = blocked.map((r) => r.id).join(", ") || "database.settings";
        for (const id of PROBE_IDS)
          results.push(notChecked(id, `the probe did not run: ${why} did not pass`, "fix those first"));
      } else {
        results.push(...(await runWriteProbe(config, db.settings, url, opts.write)));
      }
    }
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
