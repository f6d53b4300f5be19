// The dependency audit (scripts/audit/check.ts, `npm run audit`, .ci/run): a high or critical
// advisory with a fixed version fails, anything else is listed. Both sources, npm audit's report and
// an OSV advisory folder on disk, are read from fixtures in their real formats; the command itself
// runs offline against a fixture folder naming a package of this project's lock file.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  compareVersions,
  lockedPackages,
  npmAuditFindings,
  osvFindings,
  verdict,
} from "../../scripts/audit/check.js";
import { projectRoot } from "../../src/local/project-root.js";
import { cleanEnv, runProcess } from "../helpers/run-process.js";

const lock = JSON.parse(readFileSync(join(projectRoot, "package-lock.json"), "utf8"));
const installed = lockedPackages(lock);
const pgVersion = installed.find((p) => p.name === "pg")?.version as string;

/** An advisory in OSV form, as github/advisory-database writes it. */
function advisory(
  id: string,
  name: string,
  events: Array<Record<string, string>>,
  severity: string,
  extra: Record<string, unknown> = {},
) {
  return {
    schema_version: "1.4.0",
    id,
    modified: "2026-01-01T00:00:00Z",
    summary: "fixture",
    affected: [{ package: { ecosystem: "npm", name }, ranges: [{ type: "ECOSYSTEM", events }] }],
    database_specific: { severity, github_reviewed: true },
    ...extra,
  };
}

function folder(advisories: object[]): string {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-osv-"));
  mkdirSync(join(dir, "advisories", "github-reviewed", "2026", "01"), { recursive: true });
  for (const [i, a] of advisories.entries()) {
    const name = `${(a as { id: string }).id}-${i}.json`;
    writeFileSync(join(dir, "advisories", "github-reviewed", "2026", "01", name), JSON.stringify(a));
  }
  return dir;
}

test("versions compare by semver precedence, prereleases below their release", (t) => {
  t.is(compareVersions("1.2.3", "1.2.3"), 0);
  t.is(compareVersions("1.10.0", "1.9.9"), 1);
  t.is(compareVersions("2.0.0-beta.2", "2.0.0"), -1);
  t.is(compareVersions("2.0.0-beta.10", "2.0.0-beta.2"), 1);
  t.is(compareVersions("2.0.0-alpha", "2.0.0-beta"), -1);
  t.is(compareVersions("15.18.0-beta.17", "15.18.0-beta.9"), 1);
  t.is(compareVersions("1.0.0+build.5", "1.0.0"), 0);
});

test("the lock file's packages, with their installed versions", (t) => {
  t.true(installed.length > 100);
  t.regex(pgVersion, /^\d+\.\d+\.\d+$/);
  t.true(
    installed.some((p) => p.name === "@opentelemetry/api"),
    "scoped names",
  );
});

test("OSV: high or critical with a fixed version above the installed one fails; the rest is listed", (t) => {
  const pkgs = [
    { name: "left-pad", version: "1.5.0" },
    { name: "right-pad", version: "3.1.0" },
    { name: "mid-pad", version: "0.9.0" },
    { name: "pre-pad", version: "2.0.0-rc.1" },
  ];
  const dir = folder([
    advisory("GHSA-fail-0001", "left-pad", [{ introduced: "0" }, { fixed: "2.0.0" }], "HIGH"),
    advisory(
      "GHSA-nofx-0002",
      "right-pad",
      [{ introduced: "3.0.0" }, { last_affected: "3.2.0" }],
      "CRITICAL",
    ),
    advisory("GHSA-mode-0003", "mid-pad", [{ introduced: "0" }, { fixed: "1.0.0" }], "MODERATE"),
    advisory("GHSA-miss-0004", "left-pad", [{ introduced: "0" }, { fixed: "1.4.0" }], "CRITICAL"),
    advisory("GHSA-pre0-0005", "pre-pad", [{ introduced: "2.0.0-beta.1" }, { fixed: "2.0.0" }], "HIGH"),
    advisory("GHSA-wdrn-0006", "left-pad", [{ introduced: "0" }], "CRITICAL", {
      withdrawn: "2026-01-02T00:00:00Z",
    }),
    {
      ...advisory("PYSEC-0007", "left-pad", [{ introduced: "0" }], "CRITICAL"),
      affected: [{ package: { ecosystem: "PyPI", name: "left-pad" }, ranges: [] }],
    },
  ]);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const { findings } = osvFindings(dir, pkgs);
  const v = verdict(findings);
  t.deepEqual(v.failing.map((f) => `${f.id} ${f.name}@${f.version}`).sort(), [
    "GHSA-fail-0001 left-pad@1.5.0",
    "GHSA-pre0-0005 pre-pad@2.0.0-rc.1",
  ]);
  t.deepEqual(v.other.map((f) => [f.id, f.severity, f.fixAvailable]).sort(), [
    ["GHSA-mode-0003", "moderate", true],
    ["GHSA-nofx-0002", "critical", false],
  ]);
});

test("npm audit's report: the same rule on its vulnerabilities and fixAvailable", (t) => {
  const report = {
    auditReportVersion: 2,
    vulnerabilities: {
      "left-pad": {
        name: "left-pad",
        severity: "high",
        isDirect: false,
        via: [
          {
            source: 1,
            name: "left-pad",
            title: "ReDoS",
            url: "https://github.com/advisories/GHSA-aaaa-bbbb-cccc",
            severity: "high",
            range: "<2.0.0",
          },
        ],
        effects: [],
        range: "<2.0.0",
        nodes: ["node_modules/left-pad"],
        fixAvailable: true,
      },
      "right-pad": {
        name: "right-pad",
        severity: "critical",
        via: [{ source: 2, url: "https://github.com/advisories/GHSA-dddd-eeee-ffff", severity: "critical" }],
        range: "*",
        fixAvailable: false,
      },
      "uses-left-pad": {
        name: "uses-left-pad",
        severity: "high",
        via: ["left-pad"],
        range: "1.x",
        fixAvailable: { name: "uses-left-pad", version: "2.0.0", isSemVerMajor: true },
      },
    },
  };
  const v = verdict(
    npmAuditFindings(report as never, [
      { name: "left-pad", version: "1.5.0" },
      { name: "uses-left-pad", version: "1.2.0" },
    ]),
  );
  t.deepEqual(
    v.failing.map((f) => [f.name, f.version, f.id]),
    [
      ["left-pad", "1.5.0", "GHSA-aaaa-bbbb-cccc"],
      ["uses-left-pad", "1.2.0", "via left-pad"],
    ],
  );
  t.deepEqual(
    v.other.map((f) => [f.name, f.fixAvailable]),
    [["right-pad", false]],
  );
});

test("npm run audit --offline fails on a fixable high advisory against this lock file, and passes without one", async (t) => {
  const bad = folder([
    advisory("GHSA-test-pg01", "pg", [{ introduced: "0" }, { fixed: "999.0.0" }], "HIGH"),
    advisory("GHSA-test-pg02", "pg", [{ introduced: "0" }, { last_affected: pgVersion }], "CRITICAL"),
  ]);
  const fine = folder([
    advisory("GHSA-test-pg03", "pg", [{ introduced: "0" }, { fixed: "1.0.0" }], "CRITICAL"),
  ]);
  t.teardown(() => {
    rmSync(bad, { recursive: true, force: true });
    rmSync(fine, { recursive: true, force: true });
  });
  const run = (dir: string) =>
    runProcess(
      process.execPath,
      ["--import", "tsx", "scripts/audit.ts", "--offline", "--db", dir],
      cleanEnv({}),
      60_000,
    );
  const failing = await run(bad);
  t.is(failing.code, 1, failing.stdout + failing.stderr);
  t.regex(
    failing.stdout,
    new RegExp(
      `^FAIL  pg@${pgVersion.replaceAll(".", "\\.")}  high  GHSA-test-pg01  \\(a fixed version exists\\)$`,
      "m",
    ),
  );
  t.regex(failing.stdout, /^note {2}pg@\S+ {2}critical {2}GHSA-test-pg02 {2}\(no fixed version yet\)$/m);
  t.regex(failing.stdout, /1 high or critical with a fix, 1 other finding\(s\); exit 1$/m);
  const passing = await run(fine);
  t.is(passing.code, 0, passing.stdout + passing.stderr);
  t.regex(passing.stdout, /0 high or critical with a fix, 0 other finding\(s\); exit 0$/m);
  const none = await runProcess(
    process.execPath,
    ["--import", "tsx", "scripts/audit.ts", "--offline"],
    cleanEnv({}),
    60_000,
  );
  t.is(none.code, 2);
  t.regex(none.stdout, /^audit: not checked: .*no advisory database was given/m);
});
