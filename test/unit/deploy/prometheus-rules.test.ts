// deploy/prometheus/: the alert rules pass promtool's check and its unit tests
// (bitrix-sync.rules.test.yml), and every alert carries what an operator needs: a severity, a
// summary, a description and a runbook section that exists in docs/runbook.md.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import test from "ava";
import { projectRoot } from "../../../src/local/project-root.js";
import {
  alertRules,
  hasPromtool,
  RULES_FILE,
  RULES_TEST_FILE,
  readRulesTest,
} from "../../helpers/prometheus.js";

const run = hasPromtool ? test : test.skip;
if (!hasPromtool) {
  console.warn(
    "prometheus-rules.test.ts: promtool checks SKIPPED, promtool is not installed (apt-get install -y prometheus)",
  );
}

run("promtool accepts the rules file", (t) => {
  const r = spawnSync("promtool", ["check", "rules", RULES_FILE], { encoding: "utf8" });
  t.is(r.status, 0, r.stdout + r.stderr);
});

run("promtool test rules: every case of bitrix-sync.rules.test.yml passes", (t) => {
  const r = spawnSync("promtool", ["test", "rules", RULES_TEST_FILE], {
    encoding: "utf8",
    cwd: dirname(RULES_TEST_FILE),
  });
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /SUCCESS/);
});

const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s+/g, "-");

test("every alert has a severity, a summary, a description and a runbook section that exists", (t) => {
  const runbook = readFileSync(join(projectRoot, "docs", "runbook.md"), "utf8");
  const anchors = new Set([...runbook.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1] as string)));
  const rules = alertRules();
  t.true(rules.length >= 10);
  for (const r of rules) {
    t.true(["critical", "warning"].includes(r.labels?.severity ?? ""), `${r.alert}: severity`);
    t.truthy(r.annotations?.summary, `${r.alert}: summary`);
    t.truthy(r.annotations?.description, `${r.alert}: description`);
    const link = r.annotations?.runbook ?? "";
    const m = /^docs\/runbook\.md#(.+)$/.exec(link);
    t.truthy(m, `${r.alert}: runbook points into docs/runbook.md`);
    t.true(anchors.has(m?.[1] ?? ""), `${r.alert}: docs/runbook.md has a section #${m?.[1]}`);
  }
});

test("every alert has cases in the promtool unit tests", (t) => {
  const tested = new Set(
    readRulesTest().tests.flatMap((c) => (c.alert_rule_test ?? []).map((a) => a.alertname)),
  );
  for (const r of alertRules()) t.true(tested.has(r.alert), `${r.alert} is tested`);
});
