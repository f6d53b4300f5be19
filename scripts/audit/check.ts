// The dependency audit of `npm run audit` and .ci/run: a high or critical advisory against a package
// of package-lock.json that has a fixed version fails the run; one without a fix, or of lower
// severity, is listed and does not. Two sources give the same verdict:
//   - `npm audit --json` (the registry's advisories), when the registry answers it;
//   - an advisory database on disk in OSV form (one JSON file per advisory: a checkout of
//     github/advisory-database, or OSV's npm export unzipped), when it does not.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export type Severity = "low" | "moderate" | "high" | "critical";

/** One advisory against one installed package. */
export interface Finding {
  name: string;
  version: string;
  severity: Severity;
  /** The advisory's id (GHSA-…) or npm's title when it has no id. */
  id: string;
  /** A version that is not affected exists (npm: `fixAvailable`). */
  fixAvailable: boolean;
}

export interface Verdict {
  /** High or critical with a fix: the run fails. */
  failing: Finding[];
  /** Everything else found: listed, does not fail. */
  other: Finding[];
}

const SEVERE: ReadonlySet<Severity> = new Set(["high", "critical"]);

export function verdict(findings: Finding[]): Verdict {
  const failing = findings.filter((f) => SEVERE.has(f.severity) && f.fixAvailable);
  return { failing, other: findings.filter((f) => !failing.includes(f)) };
}

/** Every installed package of a package-lock.json (v2/v3): name and version. */
export function lockedPackages(lock: {
  packages?: Record<string, { name?: string; version?: string; link?: boolean }>;
}): Array<{ name: string; version: string }> {
  const out: Array<{ name: string; version: string }> = [];
  for (const [path, p] of Object.entries(lock.packages ?? {})) {
    if (path === "" || p.link || !p.version) continue;
    const name = p.name ?? path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);
    out.push({ name, version: p.version });
  }
  return out;
}

// --- npm audit --json (auditReportVersion 2) ----------------------------------------------------

interface NpmVulnerability {
  name: string;
  severity: Severity;
  range?: string;
  via: Array<string | { source?: number; url?: string; title?: string; severity?: Severity }>;
  fixAvailable: boolean | object;
}

/** The findings of an `npm audit --json` report, one per vulnerable package. */
export function npmAuditFindings(
  report: { vulnerabilities?: Record<string, NpmVulnerability> },
  installed: Array<{ name: string; version: string }>,
): Finding[] {
  return Object.values(report.vulnerabilities ?? {}).map((v) => {
    const direct = v.via.find((x): x is Exclude<typeof x, string> => typeof x !== "string");
    const id = direct?.url?.replace(/^.*\//, "") ?? direct?.title ?? `via ${v.via.join(", ")}`;
    return {
      name: v.name,
      version: installed.find((p) => p.name === v.name)?.version ?? v.range ?? "?",
      severity: v.severity,
      id,
      fixAvailable: v.fixAvailable !== false,
    };
  });
}

// --- an OSV advisory database on disk ------------------------------------------------------------

interface OsvEvent {
  introduced?: string;
  fixed?: string;
  last_affected?: string;
}
interface OsvAdvisory {
  id: string;
  withdrawn?: string;
  affected?: Array<{
    package?: { ecosystem?: string; name?: string };
    ranges?: Array<{ type?: string; events?: OsvEvent[] }>;
    versions?: string[];
  }>;
  database_specific?: { severity?: string };
}

/** Semantic versions compared by precedence (semver.org §11); build metadata ignored. */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string) => {
    const [core = "", pre] = v.replace(/^v/, "").split("+")[0]?.split(/-(.*)/s) ?? [];
    return { core: core.split(".").map((n) => Number(n) || 0), pre: pre ? pre.split(".") : [] };
  };
  const x = parse(a);
  const y = parse(b);
  for (let i = 0; i < 3; i++) {
    const d = (x.core[i] ?? 0) - (y.core[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  if (x.pre.length === 0 || y.pre.length === 0) return Math.sign(y.pre.length - x.pre.length);
  for (let i = 0; i < Math.max(x.pre.length, y.pre.length); i++) {
    const p = x.pre[i];
    const q = y.pre[i];
    if (p === undefined) return -1;
    if (q === undefined) return 1;
    const pn = /^\d+$/.test(p);
    const qn = /^\d+$/.test(q);
    if (pn && qn) {
      const d = Number(p) - Number(q);
      if (d !== 0) return Math.sign(d);
    } else if (pn !== qn) return pn ? -1 : 1;
    else if (p !== q) return p < q ? -1 : 1;
  }
  return 0;
}

/** Whether `version` falls in one OSV range's events, and the fixed version above it if any. */
function inRange(version: string, events: OsvEvent[]): { affected: boolean; fixedAbove: boolean } {
  let affected = false;
  let fixedAbove = false;
  const sorted = events
    .map((e) => ({ e, at: e.introduced ?? e.fixed ?? e.last_affected ?? "0" }))
    .sort((p, q) => compareVersions(p.at === "0" ? "0.0.0" : p.at, q.at === "0" ? "0.0.0" : q.at));
  for (const { e } of sorted) {
    if (e.introduced !== undefined) {
      const from = e.introduced === "0" ? "0.0.0-0" : e.introduced;
      if (compareVersions(version, from) >= 0) affected = true;
    } else if (e.fixed !== undefined) {
      if (compareVersions(version, e.fixed) >= 0) affected = false;
      else if (affected) fixedAbove = true;
    } else if (e.last_affected !== undefined) {
      if (compareVersions(version, e.last_affected) > 0) affected = false;
    }
  }
  return { affected, fixedAbove: affected && fixedAbove };
}

function severityOf(a: OsvAdvisory): Severity {
  const s = (a.database_specific?.severity ?? "").toLowerCase();
  return s === "critical" || s === "high" || s === "low" ? s : "moderate";
}

function* jsonFiles(dir: string): Generator<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) yield* jsonFiles(join(dir, e.name));
    else if (e.name.endsWith(".json")) yield join(dir, e.name);
  }
}

/** The findings for `installed` in the OSV advisories under `dir` (npm ecosystem only). */
export function osvFindings(
  dir: string,
  installed: Array<{ name: string; version: string }>,
): { findings: Finding[]; advisories: number } {
  const byName = new Map<string, string[]>();
  for (const p of installed) byName.set(p.name, [...(byName.get(p.name) ?? []), p.version]);
  const findings: Finding[] = [];
  let advisories = 0;
  for (const file of jsonFiles(dir)) {
    const text = readFileSync(file, "utf8");
    // Cheap filter first: most advisories are of other ecosystems.
    if (!text.includes('"npm"')) continue;
    const a = JSON.parse(text) as OsvAdvisory;
    if (a.withdrawn) continue;
    advisories++;
    for (const aff of a.affected ?? []) {
      if (aff.package?.ecosystem !== "npm" || !aff.package.name) continue;
      for (const version of byName.get(aff.package.name) ?? []) {
        let affected = aff.versions?.includes(version) ?? false;
        let fixedAbove = false;
        for (const r of aff.ranges ?? []) {
          if (r.type !== "SEMVER" && r.type !== "ECOSYSTEM") continue;
          const hit = inRange(version, r.events ?? []);
          if (hit.affected) affected = true;
          if (hit.fixedAbove) fixedAbove = true;
        }
        if (affected) {
          findings.push({
            name: aff.package.name,
            version,
            severity: severityOf(a),
            id: a.id,
            fixAvailable: fixedAbove,
          });
        }
      }
    }
  }
  return { findings, advisories };
}
