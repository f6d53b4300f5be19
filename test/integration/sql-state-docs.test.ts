// docs/state-machines.md must draw exactly the edges of bitrix_sync.state_edges (the list the guard
// triggers enforce) and say who moves a row out of every non-final state, so the doc cannot drift.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { sqlFiles } from "../../src/db/migration-layout.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

const DOC = join(import.meta.dirname, "..", "..", "docs", "state-machines.md");

interface Section {
  machine: string;
  edges: string[];
  /** States named in the first column of the section's "who moves it out" table. */
  described: Set<string>;
  /** The state drawn as `[*] --> state`: where rows start. */
  initial: string | undefined;
}

/** `machine from --event--> to`, one string per edge, so a failing diff reads like the diagram. */
const edgeKey = (machine: string, from: string, to: string, event: string) =>
  `${machine}: ${from} --${event}--> ${to}`;

function parseDoc(text: string): Section[] {
  const sections: Section[] = [];
  const blocks = [...text.matchAll(/```mermaid\n([\s\S]*?)```/g)];
  for (const [i, block] of blocks.entries()) {
    const body = block[1] ?? "";
    const machine = /^\s*%% machine: (\w+)\s*$/m.exec(body)?.[1];
    if (!machine) throw new Error(`mermaid block ${i + 1} has no "%% machine: <name>" line`);
    const edges: string[] = [];
    let initial: string | undefined;
    for (const line of body.split("\n")) {
      const start = /^\s*\[\*\]\s*-->\s*(\w+)\s*$/.exec(line);
      if (start) initial = start[1];
      if (line.includes("[*]")) continue;
      const m = /^\s*(\w+)\s*-->\s*(\w+)\s*:\s*(\w+)\s*$/.exec(line);
      if (m) edges.push(edgeKey(machine, m[1] ?? "", m[2] ?? "", m[3] ?? ""));
      else if (line.includes("-->")) throw new Error(`${machine}: cannot parse edge line "${line.trim()}"`);
    }
    // The section's text runs from this diagram to the next heading.
    const start = (block.index ?? 0) + block[0].length;
    const next = text.indexOf("\n## ", start);
    const rest = text.slice(start, next === -1 ? undefined : next);
    const described = new Set<string>();
    for (const row of rest.split("\n").filter((l) => l.startsWith("| `"))) {
      const firstCell = row.split("|")[1] ?? "";
      for (const s of firstCell.matchAll(/`(\w+)`/g)) described.add(s[1] ?? "");
    }
    sections.push({ machine, edges, described, initial });
  }
  return sections;
}

test("docs/state-machines.md draws exactly the edges of bitrix_sync.state_edges", async (t) => {
  const sections = parseDoc(readFileSync(DOC, "utf8"));
  const documented = sections.flatMap((s) => s.edges);
  t.deepEqual(
    documented.filter((e, i) => documented.indexOf(e) !== i),
    [],
    "an edge is drawn twice",
  );

  const { rows } = await db.pool.query<{
    machine: string;
    from_state: string;
    to_state: string;
    event: string;
  }>("select machine, from_state, to_state, event from bitrix_sync.state_edges");
  t.true(rows.length > 0);
  const inDb = rows.map((r) => edgeKey(r.machine, r.from_state, r.to_state, r.event));
  t.deepEqual(
    inDb.filter((e) => !documented.includes(e)).sort(),
    [],
    "edges of bitrix_sync.state_edges missing from the doc",
  );
  t.deepEqual(
    documented.filter((e) => !inDb.includes(e)).sort(),
    [],
    "edges in the doc that bitrix_sync.state_edges does not have",
  );
  t.deepEqual([...documented].sort(), [...inDb].sort());

  const machines = [...new Set(rows.map((r) => r.machine))].sort();
  t.deepEqual(sections.map((s) => s.machine).sort(), machines, "one diagram per machine");
});

test("docs/state-machines.md says who moves a row out of every state that has an exit", async (t) => {
  const sections = parseDoc(readFileSync(DOC, "utf8"));
  const { rows } = await db.pool.query<{ machine: string; from_state: string }>(
    "select distinct machine, from_state from bitrix_sync.state_edges",
  );
  const missing = rows
    .filter((r) => !sections.find((s) => s.machine === r.machine)?.described.has(r.from_state))
    .map((r) => `${r.machine}: ${r.from_state}`)
    .sort();
  t.deepEqual(missing, []);
});

test("the state drawn as where rows start is the one each table's insert guard accepts", async (t) => {
  const sections = parseDoc(readFileSync(DOC, "utf8"));
  // The guard trigger names the machine; the insert guard on the same table its initial state.
  const { rows } = await db.pool.query<{ guard: string; initial: string | null }>(`
    select pg_get_triggerdef(g.oid) as guard, pg_get_triggerdef(i.oid) as initial
      from pg_trigger g
      left join pg_trigger i on i.tgrelid = g.tgrelid and i.tgname = '_110_initial_state'
     where g.tgname like '\\_100\\_guard\\_%'`);
  t.is(rows.length, 8);
  for (const r of rows) {
    // tg__guard_transition, or a table's own guard of the same arguments (workflow_instances).
    const [, machine, column] = /tg_\w*guard\w*\('(\w+)', '(\w+)'\)/.exec(r.guard) ?? [];
    const initial = new RegExp(`\\(new\\.${column}\\)::text <> '(\\w+)'`).exec(r.initial ?? "")?.[1];
    t.truthy(initial, `${machine}: no insert guard`);
    t.is(sections.find((s) => s.machine === machine)?.initial, initial, `${machine}`);
  }
});

test("each guard's WHEN lists exactly its machine's edges, and a change off them still reaches the guard", async (t) => {
  // The legal edges are compiled into the guard's WHEN (sql/guards/transitions.sql): a legal change
  // runs no PL/pgSQL. A WHEN that lost an edge would send a legal change to the function (which
  // admits it: slower only); one that kept a removed edge would let it through unchecked.
  const { rows } = await db.pool.query<{ guard: string; edges: string[] }>(`
    select pg_get_triggerdef(g.oid) as guard,
           (select coalesce(array_agg(distinct e.from_state || '>' || e.to_state), '{}')
              from bitrix_sync.state_edges e where e.machine = g.tgargs_machine) as edges
      from (select t.oid, split_part(encode(t.tgargs, 'escape'), '\\000', 1) as tgargs_machine
              from pg_trigger t where t.tgname like '\\_100\\_guard\\_%') g`);
  t.is(rows.length, 8);
  for (const r of rows) {
    const listed = /ANY \('\{([^}]*)\}'::text\[\]\)/.exec(r.guard)?.[1];
    t.truthy(listed, r.guard);
    t.deepEqual((listed ?? "").split(",").sort(), [...r.edges].sort(), r.guard);
  }
  // An edge the view does not have is refused by the function the WHEN lets through.
  await t.throwsAsync(
    db.pool.query("update bitrix_sync.settings_versions set status = 'draft' where status = 'active'"),
    { code: "BS002" },
  );
});

test("the doc parser rejects a diagram without a machine and an edge without an event", (t) => {
  t.throws(() => parseDoc("```mermaid\nstateDiagram-v2\n  a --> b : go\n```\n"), {
    message: /no "%% machine/,
  });
  t.throws(() => parseDoc("```mermaid\nstateDiagram-v2\n  %% machine: m\n  a --> b\n```\n"), {
    message: /cannot parse edge/,
  });
  t.deepEqual(
    parseDoc("```mermaid\nstateDiagram-v2\n  %% machine: m\n  [*] --> a\n  a --> b : go\n```\n")[0]?.edges,
    ["m: a --go--> b"],
  );
});

test("docs/errors.md has a row for exactly the BS SQLSTATEs raised in sql/ (every folder) and migrations/src", (t) => {
  const root = join(import.meta.dirname, "..", "..");
  const raised = new Set<string>();
  const files = [
    ...sqlFiles(root),
    ...readdirSync(join(root, "migrations", "src"))
      .filter((n) => n.endsWith(".sql"))
      .map((n) => join("migrations", "src", n)),
  ];
  for (const f of files) {
    for (const m of readFileSync(join(root, f), "utf8").matchAll(/errcode\s*=\s*'(BS\d{3})'/g)) {
      raised.add(m[1] ?? "");
    }
  }
  t.true(raised.has("BS001"), "the scan found the codes");
  const rows = [
    ...readFileSync(join(root, "docs", "errors.md"), "utf8").matchAll(/^\| `(BS\d{3})` \|/gm),
  ].map((m) => m[1] ?? "");
  t.deepEqual(
    rows.filter((c, i) => rows.indexOf(c) !== i),
    [],
    "a code documented twice",
  );
  t.deepEqual([...raised].filter((c) => !rows.includes(c)).sort(), [], "raised but not in docs/errors.md");
  t.deepEqual(
    rows.filter((c) => !raised.has(c)),
    [],
    "documented but raised nowhere",
  );
});
