// The structure of src/ (docs/README.md, "Where each rule lives"): no import circle, type-only imports
// included, and the base layers (observability/, db/) import nothing from the service's domain.
// A static read of the import statements, no module is loaded.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import test from "ava";

const SRC = resolve(import.meta.dirname, "../../../src");

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** Module (relative to src/) -> the modules of src/ it imports or re-exports from. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const text = readFileSync(file, "utf8");
    const deps = [...text.matchAll(/^(?:import|export)\s[^;]*?\sfrom\s+"(\.{1,2}\/[^"]+)"/gms)].map((m) =>
      relative(SRC, resolve(dirname(file), (m[1] as string).replace(/\.js$/, ".ts"))),
    );
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

/** What the base layers may import: each other, configuration, the local paths, the version. */
const BASE_MAY_IMPORT = /^(config|db|local|observability)\/|^version\.ts$/;

test("observability/ and db/ import nothing from the service's domain", (t) => {
  const upward: string[] = [];
  for (const [mod, deps] of importGraph()) {
    if (!/^(observability|db)\//.test(mod)) continue;
    for (const d of deps) if (!BASE_MAY_IMPORT.test(d)) upward.push(`${mod} -> ${d}`);
  }
  t.deepEqual(upward, []);
});
