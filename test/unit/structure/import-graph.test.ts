// The structure of src/ (docs/README.md, "Where each rule lives"): no import circle, type-only
// imports and lazy `import()` calls included; no arrow upward against the layers below; and the
// tools beside the service (the sandbox portal, the demo, preflight's write probe, the migration
// building) stand apart from it: arrows go from them into the service, never back, but for the one
// lazy import that starts the sandbox portal when nothing is configured (`npm start`).
// A static read of the import statements, no module is loaded.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import test from "ava";

const SRC = resolve(import.meta.dirname, "../../../src");
/** The sandbox portal and the demo, beside src/: in the graph as `../tools/...`. */
const TOOLS_DIR = resolve(import.meta.dirname, "../../../tools");

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** The relative modules a text loads with `import("...")` (sandbox mode, the embedded PostgreSQL). */
function lazyImports(text: string): string[] {
  return [...text.matchAll(/\bimport\(\s*"(\.{1,2}\/[^"]+)"\s*\)/g)].map((m) => m[1] as string);
}

/**
 * Module (relative to src/; tools/ as `../tools/`) -> the modules it imports, re-exports from or
 * loads lazily.
 */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of [...sources(SRC), ...sources(TOOLS_DIR)]) {
    const text = readFileSync(file, "utf8");
    const specs = [
      ...[...text.matchAll(/^(?:import|export)\s[^;]*?\sfrom\s+"(\.{1,2}\/[^"]+)"/gms)].map(
        (m) => m[1] as string,
      ),
      ...lazyImports(text),
    ];
    const deps = specs.map((spec) => relative(SRC, resolve(dirname(file), spec.replace(/\.js$/, ".ts"))));
    graph.set(relative(SRC, file), deps);
  }
  return graph;
}

/** Strongly connected components of more than one module (Tarjan): every import circle. */
function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

test("src/ has no import circle", (t) => {
  t.deepEqual(circles(importGraph()), []);
});

test("the circle check finds a circle", (t) => {
  const g = new Map([
    ["a.ts", ["b.ts"]],
    ["b.ts", ["c.ts"]],
    ["c.ts", ["a.ts"]],
    ["d.ts", ["a.ts"]],
  ]);
  t.deepEqual(circles(g), [["a.ts", "b.ts", "c.ts"]]);
});

test("a lazy import is read", (t) => {
  t.deepEqual(lazyImports('const { a } = await import("../emulator/sandbox.js");'), [
    "../emulator/sandbox.js",
  ]);
});

/**
 * The layers of src/, lowest first: a module imports only from its own layer or one below it. Within a
 * layer the circle check above is the rule. The tools beside the service (TOOLS) are not in a layer.
 */
const LAYERS: readonly (readonly string[])[] = [
  // Leaves: the build, the App's table hooks, the hot settings' schema, the keyed hashes.
  ["version.ts", "app-tables.ts", "settings-schema.ts", "hash.ts"],
  // The environment, secrets and the names the configuration shares (receivers, the edge contract).
  ["config/"],
  // The checkout and the local state folder; logs, metrics and traces.
  ["local/", "observability/"],
  // PostgreSQL: pools, transactions, migrations, errors.
  ["db/"],
  // The Bitrix24 client and limiter; health; the App's data; the settings cache; the service context.
  ["crm/", "health/", "app-data.ts", "settings-cache.ts", "context.ts"],
  // Alerts, the audit, maintenance, the worker.
  ["alerts/", "audit/", "maintenance/", "worker/"],
  // The two directions: robot webhooks and reconciliation into the App; workflows from the App.
  ["inbound/", "workflows/"],
  // What runs them: HTTP, the sync loop, the runtime, startup.
  ["http/", "sync-loop.ts", "runtime.ts", "startup/"],
  // The entry point.
  ["main.ts"],
];

/**
 * Tools beside the service: tools/ (the sandbox portal, the demo), preflight (`npm run preflight`,
 * its write probe included) and the migration building (`npm run db:build`, the compatibility check).
 */
const TOOLS = [
  "../tools/",
  "preflight/",
  "db/compatibility.ts",
  "db/migration-chain.ts",
  "db/migration-layout.ts",
  "db/migration-source.ts",
  "db/migration-summary.ts",
  "db/schema-dump.ts",
];

/** The service's one arrow into the tools: sandbox mode's lazy import of the sandbox portal. */
const SERVICE_INTO_TOOLS = ["startup/crm-endpoint.ts -> ../tools/emulator/sandbox.ts"];

const isTool = (mod: string): boolean =>
  TOOLS.some((p) => mod === p || (p.endsWith("/") && mod.startsWith(p)));

function layerOf(mod: string): number {
  return LAYERS.findIndex((names) => names.some((p) => mod === p || (p.endsWith("/") && mod.startsWith(p))));
}

test("every module of the service is in a layer", (t) => {
  t.deepEqual(
    [...importGraph().keys()].filter((m) => !isTool(m) && layerOf(m) < 0),
    [],
  );
});

test("no arrow upward against the layers", (t) => {
  const upward: string[] = [];
  for (const [mod, deps] of importGraph()) {
    if (isTool(mod)) continue;
    for (const d of deps) if (!isTool(d) && layerOf(d) > layerOf(mod)) upward.push(`${mod} -> ${d}`);
  }
  t.deepEqual(upward, []);
});

test("the service imports nothing from the tools beside it but the sandbox portal, lazily", (t) => {
  const into: string[] = [];
  for (const [mod, deps] of importGraph()) {
    if (isTool(mod)) continue;
    for (const d of deps) if (isTool(d)) into.push(`${mod} -> ${d}`);
  }
  t.deepEqual(into, SERVICE_INTO_TOOLS);
  const crmEndpoint = readFileSync(join(SRC, "startup/crm-endpoint.ts"), "utf8");
  t.deepEqual(
    lazyImports(crmEndpoint),
    ["../../tools/emulator/sandbox.js"],
    "the sandbox portal is loaded lazily",
  );
});
