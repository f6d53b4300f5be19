// bench:scale's plans: every statement a hot-path call runs, the ones inside the project's PL/pgSQL
// functions included, as EXPLAIN (ANALYZE, BUFFERS) shows it. auto_explain is loaded into one session
// (superuser; nothing changes on the server) with log_nested_statements, and logs at NOTICE so the
// plans come back to this client instead of the server log. Each plan is summarised as its node
// types and index names; a sequential scan of a table with more than LARGE rows is flagged.
import pg from "pg";

/** Tables above this many rows (pg_class.reltuples) are large: a Seq Scan on one is flagged. */
export const LARGE = 100_000;

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Shared Hit Blocks"?: number;
  "Shared Read Blocks"?: number;
  Plans?: PlanNode[];
}

export interface StatementPlan {
  query: string;
  ms: number;
  nodes: string[];
  seqScans: string[];
  largeSeqScans: string[];
  buffers: number;
}

export interface PlanCapture {
  client: pg.Client;
  /** Runs `fn` (on `client`) and returns the plans of every statement it executed. */
  capture(fn: (c: pg.Client) => Promise<unknown>): Promise<StatementPlan[]>;
  close(): Promise<void>;
}

export async function planCapture(url: string): Promise<PlanCapture> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const sizes = new Map<string, number>(
    (
      await client.query<{ name: string; n: number }>(
        `select c.relname as name, c.reltuples::float8 as n from pg_class c
          join pg_namespace s on s.oid = c.relnamespace
         where c.relkind = 'r' and s.nspname in ('han_app', 'bitrix_sync', 'graphile_worker')`,
      )
    ).rows.map((r) => [r.name, r.n]),
  );
  let sink: string[] | null = null;
  client.on("notice", (n) => {
    if (sink && typeof n.message === "string" && n.message.includes("plan:")) sink.push(n.message);
  });
  for (const s of [
    "load 'auto_explain'",
    "set auto_explain.log_min_duration = 0",
    "set auto_explain.log_analyze = on",
    "set auto_explain.log_buffers = on",
    "set auto_explain.log_timing = on",
    "set auto_explain.log_nested_statements = on",
    "set auto_explain.log_format = json",
    "set auto_explain.log_level = notice",
  ])
    await client.query(s);
  return {
    client,
    async capture(fn) {
      const got: string[] = [];
      sink = got;
      try {
        await fn(client);
      } finally {
        sink = null;
      }
      return got.map((m) => summarise(m, sizes)).filter((p): p is StatementPlan => p !== null);
    },
    async close() {
      await client.end();
    },
  };
}

function summarise(message: string, sizes: Map<string, number>): StatementPlan | null {
  const at = message.indexOf("{");
  if (at < 0) return null;
  let doc: { "Query Text"?: string; Plan?: PlanNode };
  try {
    doc = JSON.parse(message.slice(at));
  } catch {
    return null;
  }
  const ms = Number(/duration: ([\d.]+) ms/.exec(message)?.[1] ?? 0);
  const nodes: string[] = [];
  const seqScans: string[] = [];
  const largeSeqScans: string[] = [];
  let buffers = 0;
  const walk = (p: PlanNode | undefined) => {
    if (!p) return;
    const label = p["Index Name"]
      ? `${p["Node Type"]}(${p["Index Name"]})`
      : p["Node Type"] === "Seq Scan"
        ? `Seq Scan(${p["Relation Name"]})`
        : p["Node Type"];
    if (!nodes.includes(label)) nodes.push(label);
    if (p["Node Type"] === "Seq Scan" && p["Relation Name"]) {
      seqScans.push(p["Relation Name"]);
      if ((sizes.get(p["Relation Name"]) ?? 0) > LARGE) largeSeqScans.push(p["Relation Name"]);
    }
    for (const c of p.Plans ?? []) walk(c);
  };
  walk(doc.Plan);
  buffers = (doc.Plan?.["Shared Hit Blocks"] ?? 0) + (doc.Plan?.["Shared Read Blocks"] ?? 0);
  return {
    query: (doc["Query Text"] ?? "").replace(/\s+/g, " ").trim(),
    ms,
    nodes,
    seqScans,
    largeSeqScans,
    buffers,
  };
}

/**
 * Prints one hot-path call's plans compactly: the statements with table access, alike ones grouped
 * (the same text and plan shape: a function's statement run for each of 50 rows, a foreign key's
 * check), each with how often it ran, its mean time, its most buffers, its nodes and any flag.
 */
export function printPlans(label: string, plans: StatementPlan[], width = 76): number {
  let flagged = 0;
  // Trivial statements (assignments, function calls without a table) say nothing about indexes.
  const shown = plans.filter((p) => p.nodes.some((n) => n !== "Result" && n !== "ProjectSet"));
  const groups = new Map<string, { p: StatementPlan; n: number; ms: number; buffers: number }>();
  for (const p of shown) {
    const key = `${p.query.slice(0, width)}|${p.nodes.join(">")}`;
    const g = groups.get(key);
    if (g) {
      g.n++;
      g.ms += p.ms;
      g.buffers = Math.max(g.buffers, p.buffers);
    } else groups.set(key, { p, n: 1, ms: p.ms, buffers: p.buffers });
  }
  console.log(`  ${label}: ${plans.length} statements, ${shown.length} with table access`);
  for (const { p, n, ms, buffers } of groups.values()) {
    const q = p.query.length > width ? `${p.query.slice(0, width - 1)}…` : p.query;
    const flag = p.largeSeqScans.length > 0 ? `  ** Seq Scan on large ${p.largeSeqScans.join(", ")} **` : "";
    if (flag) flagged++;
    console.log(
      `    ${String(n).padStart(3)} x ${(ms / n).toFixed(2).padStart(8)} ms ${String(buffers).padStart(7)} buf  ${q}\n${" ".repeat(10)}${p.nodes.join(" > ")}${flag}`,
    );
  }
  return flagged;
}
