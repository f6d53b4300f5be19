// `npm run audit [-- --db <dir>] [-- --offline]`: the dependency audit (scripts/audit/check.ts).
// Exit 0 nothing high or critical with a fix, 1 something is (the lines name it), 2 it could not be
// checked: the registry refused `npm audit` and no advisory database was given, 64 usage.
//
// The source is `npm audit --json` when the registry answers it. Some registries and mirrors do not
// (405 on its POST endpoint): then an advisory database on disk in OSV form is read instead, from
// --db <dir> or AUDIT_ADVISORY_DB (a checkout of github/advisory-database, or OSV's npm export
// unzipped). --offline skips npm audit and reads only that database.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../src/local/project-root.js";
import { type Finding, lockedPackages, npmAuditFindings, osvFindings, verdict } from "./audit/check.js";

let args: { db?: string; offline?: boolean };
try {
  args = parseArgs({
    options: { db: { type: "string" }, offline: { type: "boolean" } },
    allowPositionals: false,
  }).values;
} catch (e) {
  console.error(`${(e as Error).message}\nusage: npm run audit -- [--db <OSV advisory folder>] [--offline]`);
  process.exit(64);
}

const lock = JSON.parse(readFileSync(join(projectRoot, "package-lock.json"), "utf8"));
const installed = lockedPackages(lock);

/** `npm audit --json`: its report, or why there is none. */
function npmAudit(): Promise<{ report: Record<string, unknown> } | { refused: string }> {
  return new Promise((resolve) => {
    execFile(
      "npm",
      ["audit", "--json", "--no-fund"],
      { cwd: projectRoot, encoding: "utf8", timeout: 120_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout) => {
        let parsed: Record<string, unknown> | null = null;
        try {
          parsed = JSON.parse(stdout) as Record<string, unknown>;
        } catch {
          parsed = null;
        }
        // npm audit exits non-zero when it finds something: the report is still there.
        if (parsed && "vulnerabilities" in parsed) return resolve({ report: parsed });
        const message =
          (parsed?.message as string | undefined) ??
          (parsed?.error as { summary?: string } | undefined)?.summary ??
          (err
            ? `${err.name}${(err as NodeJS.ErrnoException).code ? ` ${(err as NodeJS.ErrnoException).code}` : ""}`
            : "no report");
        resolve({ refused: String(message).split("\n")[0] ?? "no report" });
      },
    );
  });
}

function line(f: Finding): string {
  return `${f.name}@${f.version}  ${f.severity}  ${f.id}${f.fixAvailable ? "  (a fixed version exists)" : "  (no fixed version yet)"}`;
}

const fromNpm = args.offline ? { refused: "not asked: --offline" } : await npmAudit();
let findings: Finding[];
let source: string;
if ("report" in fromNpm) {
  findings = npmAuditFindings(fromNpm.report, installed);
  source = "npm audit";
} else {
  const db = args.db ?? process.env.AUDIT_ADVISORY_DB;
  if (!db) {
    console.log(
      `audit: not checked: the registry refused npm audit (${fromNpm.refused}) and no advisory database was given (--db <folder> or AUDIT_ADVISORY_DB: an OSV advisory folder, docs/security.md)`,
    );
    process.exit(2);
  }
  const r = osvFindings(db, installed);
  findings = r.findings;
  source = `the OSV advisories in ${db} (${r.advisories} for npm; npm audit: ${fromNpm.refused})`;
}
const v = verdict(findings);
for (const f of v.failing) console.log(`FAIL  ${line(f)}`);
for (const f of v.other) console.log(`note  ${line(f)}`);
console.log(
  `audit: ${installed.length} packages checked against ${source}: ${v.failing.length} high or critical with a fix, ${v.other.length} other finding(s); exit ${v.failing.length > 0 ? 1 : 0}`,
);
process.exitCode = v.failing.length > 0 ? 1 : 0;
